//! Pure parts of the Repository controller: status transitions, events, ref resolution,
//! credential-template rules, Secret → Repository mapping, sanitisation.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::events::EventType;

use crate::api::conditions::CONDITION_STALLED;

use super::*;
use crate::api::repository::RepositorySpec;
use crate::api::LocalObjectReference;

fn at(secs: i64) -> Time {
    Time(Timestamp::from_second(secs).unwrap())
}

fn rev(r: &str, sha: &str) -> FetchedRevision {
    FetchedRevision {
        ref_: r.into(),
        revision: sha.into(),
    }
}

fn remote(name: &str, sha: &str) -> RemoteRef {
    RemoteRef {
        name: name.into(),
        sha: sha.into(),
        symref_target: None,
    }
}

fn repo(ns: &str, name: &str, url: &str, template: bool, secret: Option<&str>) -> Arc<Repository> {
    Arc::new(Repository {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..ObjectMeta::default()
        },
        spec: RepositorySpec {
            url: url.into(),
            credential_template: template,
            secret_ref: secret.map(|s| LocalObjectReference { name: s.into() }),
            poll_interval: "60s".into(),
            // Widens only the operator namespace's: elsewhere a Repository serves its own namespace.
            source_namespaces: vec!["*".into()],
            ..RepositorySpec::default()
        },
        status: None,
    })
}

#[test]
fn status_transitions_keep_revisions_and_transition_time() {
    let listed = Observation::Listed {
        revisions: vec![rev("HEAD", &"a".repeat(40)), rev("main", &"a".repeat(40))],
    };
    let s1 = next_status(None, &listed, Some(1), &at(10));
    let ready = find_condition(&s1.conditions, CONDITION_READY).unwrap();
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("True", "Succeeded"));
    assert!(ready.message.contains("HEAD at aaaaaaa"), "{}", ready.message);
    assert_eq!(s1.observed_generation, Some(1));
    assert_eq!(s1.last_fetched_at, Some(at(10)));

    // Polling again with the same refs changes nothing but timestamps: no write.
    let s2 = next_status(Some(&s1), &listed, Some(1), &at(20));
    assert!(status::eq_ignoring_time(&s1, &s2));
    assert_eq!(
        find_condition(&s2.conditions, CONDITION_READY)
            .unwrap()
            .last_transition_time,
        at(10)
    );

    // A failure keeps the last good revisions and lastFetchedAt, records lastError.
    let failed = Observation::Failed {
        reason: "AuthenticationFailed",
        message: "authentication failed: https://h/r".into(),
    };
    let s3 = next_status(Some(&s2), &failed, Some(1), &at(30));
    let ready = find_condition(&s3.conditions, CONDITION_READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "AuthenticationFailed")
    );
    assert_eq!(ready.last_transition_time, at(30));
    assert_eq!(s3.last_fetched_revision, s1.last_fetched_revision);
    assert_eq!(s3.last_fetched_at, Some(at(20)));
    assert_eq!(s3.last_error.as_deref(), Some("authentication failed: https://h/r"));

    // Invalid spec: Stalled too; recovering removes Stalled and lastError.
    let s4 = next_status(
        Some(&s3),
        &Observation::Invalid {
            reason: "InvalidSpec",
            message: "pollInterval: bad".into(),
        },
        Some(2),
        &at(40),
    );
    assert!(status::is_condition(&s4.conditions, CONDITION_STALLED, "True"));
    assert_eq!(
        find_condition(&s4.conditions, CONDITION_READY).unwrap().reason,
        "InvalidSpec"
    );
    let s5 = next_status(Some(&s4), &listed, Some(3), &at(50));
    assert!(find_condition(&s5.conditions, CONDITION_STALLED).is_none());
    assert_eq!(s5.last_error, None);
    assert_eq!(s5.observed_generation, Some(3));
}

#[test]
fn events_on_transitions_and_new_revisions_only() {
    let a = "a".repeat(40);
    let b = "b".repeat(40);
    let listed = |sha: &str| Observation::Listed {
        revisions: vec![rev("HEAD", sha)],
    };
    let s1 = next_status(None, &listed(&a), Some(1), &at(1));
    let ev = events_for(None, &s1, &revision_changes("ns", "k", &[], &s1.last_fetched_revision));
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].0, ev[0].1.as_str()), (EventType::Normal, "RepositoryReady"));

    // Same again: nothing.
    let s2 = next_status(Some(&s1), &listed(&a), Some(1), &at(2));
    assert!(events_for(Some(&s1), &s2, &[]).is_empty());

    // New commit: NewRevision, no Ready event.
    let s3 = next_status(Some(&s2), &listed(&b), Some(1), &at(3));
    let changes = revision_changes("ns", "k", &s2.last_fetched_revision, &s3.last_fetched_revision);
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].previous.as_deref(), Some(a.as_str()));
    let ev = events_for(Some(&s2), &s3, &changes);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].1, "NewRevision");
    assert!(ev[0].2.contains("HEAD: aaaaaaa -> bbbbbbb"), "{}", ev[0].2);

    // Failure: Warning with the category; a different failure: another Warning; same: nothing.
    let fail = |reason: &'static str| Observation::Failed {
        reason,
        message: "m".into(),
    };
    let s4 = next_status(Some(&s3), &fail("Timeout"), Some(1), &at(4));
    let ev = events_for(Some(&s3), &s4, &[]);
    assert_eq!((ev[0].0, ev[0].1.as_str()), (EventType::Warning, "Timeout"));
    let s5 = next_status(Some(&s4), &fail("Timeout"), Some(1), &at(5));
    assert!(events_for(Some(&s4), &s5, &[]).is_empty());
    let s6 = next_status(Some(&s5), &fail("AuthenticationFailed"), Some(1), &at(6));
    assert_eq!(events_for(Some(&s5), &s6, &[])[0].1, "AuthenticationFailed");
    let s7 = next_status(Some(&s6), &listed(&b), Some(1), &at(7));
    assert_eq!(events_for(Some(&s6), &s7, &[])[0].1, "RepositoryReady");
}

#[test]
fn refs_resolve_branch_before_tag_and_peel_annotated_tags() {
    let c1 = "1".repeat(40);
    let c2 = "2".repeat(40);
    let tag_obj = "3".repeat(40);
    let remote_refs = vec![
        RemoteRef {
            name: "HEAD".into(),
            sha: c2.clone(),
            symref_target: Some("refs/heads/main".into()),
        },
        remote("refs/heads/main", &c2),
        remote("refs/heads/v1", &c2),
        remote("refs/tags/v1", &c1),
        remote("refs/tags/v2", &tag_obj),
        remote("refs/tags/v2^{}", &c2),
    ];
    let consumers: BTreeSet<String> = ["v1", "v2", "refs/tags/v1", "missing", &"a".repeat(40), "--bad"]
        .into_iter()
        .map(String::from)
        .collect();
    let tracked = tracked_refs(&remote_refs, consumers);
    assert!(tracked.contains("HEAD") && tracked.contains("main"));
    let resolved = resolve_refs(&tracked, &remote_refs);
    assert_eq!(
        resolved,
        vec![
            rev("HEAD", &c2),
            rev("main", &c2),
            rev("refs/tags/v1", &c1),
            rev("v1", &c2),
            rev("v2", &c2),
        ]
    );
}

#[test]
fn credential_templates_respect_namespaces_and_boundaries() {
    let op = "capstan-system";
    assert!(template_serves("team-a", "team-a", op));
    assert!(template_serves(op, "team-a", op));
    assert!(!template_serves("team-b", "team-a", op));

    let all = vec![
        repo(op, "host", "https://git.example.com", true, Some("s-host")),
        repo(op, "org", "https://git.example.com/org", true, Some("s-org")),
        repo(
            "team-b",
            "team-b-org-team",
            "https://git.example.com/org/team",
            true,
            Some("s"),
        ),
        repo("team-a", "team-a-org", "https://git.example.com/org", true, Some("s-a")),
        repo(
            "team-a",
            "not-a-template",
            "https://git.example.com/org/team",
            false,
            None,
        ),
    ];
    let pick = |ns: &str, url: &str| {
        let candidates = eligible_templates(&all, ns, op);
        pick_template(&candidates, &RepoUrl::parse(url).unwrap()).map(|t| t.name_any())
    };
    // team-b's longer template is invisible to team-a; team-a's own wins the tie with the operator one.
    assert_eq!(
        pick("team-a", "https://git.example.com/org/team/r").as_deref(),
        Some("team-a-org")
    );
    assert_eq!(
        pick("team-b", "https://git.example.com/org/team/r").as_deref(),
        Some("team-b-org-team")
    );
    assert_eq!(pick("team-c", "https://git.example.com/org/r").as_deref(), Some("org"));
    assert_eq!(
        pick("team-c", "https://git.example.com/other/r").as_deref(),
        Some("host")
    );
    assert_eq!(pick("team-c", "https://git.example.com.evil.io/org/r"), None);
    assert_eq!(
        pick("team-c", "https://git.example.com/org-evil/r").as_deref(),
        Some("host")
    );
}

#[test]
fn secret_changes_map_to_the_repositories_using_them() {
    let op = "capstan-system";
    let all = vec![
        repo("team-a", "uses-s", "https://h.example/o/r", false, Some("s")),
        repo(
            "team-b",
            "other-ns-same-name",
            "https://h.example/o/r",
            false,
            Some("s"),
        ),
        repo(op, "tpl", "https://h.example/o", true, Some("tpl-secret")),
        repo("team-c", "served", "https://h.example/o/x", false, None),
        repo("team-c", "not-under-prefix", "https://h.example/p/x", false, None),
        repo("team-a", "tpl-a", "https://h.example", true, Some("s")),
    ];
    let secret = |ns: &str, name: &str| PartialObjectMeta::<Secret> {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..ObjectMeta::default()
        },
        ..Default::default()
    };
    let names = |refs: Vec<ObjectRef<Repository>>| {
        let mut v: Vec<String> = refs
            .into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect();
        v.sort();
        v
    };
    // team-a's template serves only team-a (uses-s has its own secretRef but is under the prefix).
    assert_eq!(
        names(repositories_using_secret(&all, &secret("team-a", "s"), op)),
        vec!["team-a/tpl-a", "team-a/uses-s"]
    );
    assert_eq!(
        names(repositories_using_secret(&all, &secret(op, "tpl-secret"), op)),
        vec![
            "capstan-system/tpl",
            "team-a/uses-s",
            "team-b/other-ns-same-name",
            "team-c/served"
        ]
    );
    assert!(repositories_using_secret(&all, &secret("team-z", "s"), op).is_empty());
}

#[test]
fn sanitize_removes_canaries_and_userinfo() {
    let creds = Credentials {
        username: Some("alice".into()),
        password: Some("CANARY-pw-123".into()),
        ..Credentials::default()
    };
    let text = "failed for https://alice:CANARY-pw-123@h.example/r?token=CANARY-q: bad password CANARY-pw-123";
    let clean = sanitize(&creds, text);
    assert!(!clean.contains("CANARY"), "{clean}");
    assert!(clean.contains("https://h.example/r"), "{clean}");
    assert!(sanitize(&creds, &"x".repeat(10_000)).len() <= MAX_MESSAGE_LEN);
}

#[test]
fn validation_of_spec() {
    let mut r = (*repo("ns", "r", "https://h.example/o/r", false, None)).clone();
    assert!(validate(&r).is_ok());
    r.spec.poll_interval = "10 minutes".into();
    assert!(validate(&r).unwrap_err().starts_with("pollInterval"));
    r.spec.poll_interval = "500ms".into();
    assert!(validate(&r).is_err());
    r.spec.poll_interval = "2s".into();
    r.spec.url = "--upload-pack=x".into();
    assert!(validate(&r).unwrap_err().starts_with("url"));
    r.spec.url = "https://h.example/o/r".into();
    r.spec.proxy = Some("socks5://127.0.0.1:1080;touch /dev/shm/pwned".into());
    assert!(validate(&r).unwrap_err().starts_with("proxy"));
    r.spec.proxy = Some("http://proxy.internal:3128".into());
    assert!(validate(&r).is_ok());
}
