use serde_json::json;

use super::*;

fn app(message: &str) -> Value {
    json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {
            "name": "web", "namespace": "team-a", "uid": "u-1", "resourceVersion": "7", "generation": 2,
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"secret\":\"x\"}"},
            "managedFields": [{"manager": "kubectl"}]
        },
        "spec": {
            "project": "default",
            "source": {"repoURL": "https://user:hunter2@git.example/repo.git?token=abc", "path": "app",
                       "targetRevision": "main",
                       "helm": {"values": "password: hunter2"}},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "web"},
            "syncPolicy": {"automated": {"prune": true}}
        },
        "status": {
            "sync": {"status": "Synced", "revision": "abc123"},
            "health": {"status": "Healthy"},
            "reconciledAt": "2026-11-26T10:00:00Z",
            "conditions": [{"type": "Ready", "status": "True", "reason": "Synced", "message": message,
                            "lastTransitionTime": "2026-11-26T10:00:00Z"}],
            "resources": [
                {"kind": "Deployment", "name": "a", "status": "Synced", "health": {"status": "Healthy"}},
                {"kind": "Service", "name": "b", "status": "OutOfSync"}
            ],
            "history": (1..=8).map(|i| json!({"id": i, "revision": format!("r{i}")})).collect::<Vec<_>>(),
            "operationState": {"phase": "Succeeded", "message": "ok", "startedAt": "t0", "finishedAt": "t1",
                               "operation": {"sync": {"revision": "abc123"}}}
        }
    })
}

#[test]
fn application_projection_is_an_allow_list() {
    let p = project(Kind::Application, &app("fine")).unwrap();
    assert_eq!(p.obj_ref.uid, "u-1");
    assert_eq!(p.obj_ref.api_version, CAPSTAN_API_VERSION);
    assert_eq!(
        p.summary,
        json!({"sync": "Synced", "health": "Healthy", "revision": "abc123", "operationPhase": "Succeeded"})
    );
    assert_eq!(p.status["source"]["repoURL"], "https://git.example/repo.git");
    assert_eq!(p.status["prune"], true);
    assert_eq!(p.status["selfHeal"], false);
    assert_eq!(p.status["resources"]["bySync"], json!({"Synced": 1, "OutOfSync": 1}));
    assert_eq!(p.status["resources"]["byHealth"], json!({"Healthy": 1, "None": 1}));
    let history: Vec<i64> = p.status["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_i64().unwrap())
        .collect();
    assert_eq!(history, vec![4, 5, 6, 7, 8]);
    assert!(!p.truncated);
    let text = serde_json::to_string(&p.status).unwrap() + &p.summary.to_string();
    for secret in [
        "hunter2",
        "token=abc",
        "managedFields",
        "last-applied",
        "helm",
        "values",
    ] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
}

#[test]
fn volatile_fields_do_not_change_the_hash() {
    let a = project(Kind::Application, &app("fine")).unwrap();
    let mut later = app("fine");
    later["status"]["reconciledAt"] = json!("2026-11-26T11:00:00Z");
    later["status"]["conditions"][0]["lastTransitionTime"] = json!("2026-11-26T11:00:00Z");
    later["metadata"]["resourceVersion"] = json!("8");
    let b = project(Kind::Application, &later).unwrap();
    assert_eq!(a.content_hash, b.content_hash);
    assert!(a.content_hash.starts_with("sha256:") && a.content_hash.len() == 71);
    later["status"]["health"]["status"] = json!("Degraded");
    assert_ne!(a.content_hash, project(Kind::Application, &later).unwrap().content_hash);
}

#[test]
fn budgets_cut_and_say_so() {
    let huge = "x".repeat(2 << 20);
    let p = project(Kind::Application, &app(&huge)).unwrap();
    assert!(p.truncated);
    assert!(json_len(&p.status) < MAX_ITEM_BYTES);
    assert_eq!(
        p.status["conditions"][0]["message"].as_str().unwrap().len(),
        MAX_CONDITION_MESSAGE
    );
    let mut many = app("m");
    many["status"]["conditions"] = json!((0..30)
        .map(|i| json!({"type": format!("C{i}"), "status": "True"}))
        .collect::<Vec<_>>());
    let p = project(Kind::Application, &many).unwrap();
    assert_eq!(p.status["conditions"].as_array().unwrap().len(), MAX_CONDITIONS);
    assert!(p.truncated);
}

#[test]
fn other_kinds_and_events() {
    let repo = json!({"metadata": {"name": "r", "namespace": "n", "uid": "r1"},
        "spec": {"url": "https://u:p@git.example/x", "secretRef": {"name": "creds"}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "lastFetchedRevision": [{"ref": "main", "revision": "abc"}]}});
    let p = project(Kind::Repository, &repo).unwrap();
    assert_eq!(p.status["url"], "https://git.example/x");
    assert_eq!(p.summary, json!({"ready": "True"}));
    assert!(!p.status.to_string().contains("creds"));
    let cluster = json!({"metadata": {"name": "c", "namespace": "n", "uid": "c1"},
        "spec": {"server": "https://k8s", "namespaces": ["a", "b"], "secretRef": {"name": "s"}},
        "status": {"serverVersion": "v1.32.0"}});
    let p = project(Kind::Cluster, &cluster).unwrap();
    assert_eq!(p.status["namespaces"], json!(["a", "b"]));
    assert_eq!(p.summary["ready"], "Unknown");
    let set = json!({"metadata": {"name": "s", "namespace": "n", "uid": "s1"},
        "spec": {"generators": [{"list": {"elements": [{"password": "x"}]}}, {"git": {"repoURL": "u"}}]},
        "status": {"resourcesCount": 3}});
    let p = project(Kind::ApplicationSet, &set).unwrap();
    assert_eq!(p.status["generators"], json!(["list", "git"]));
    assert_eq!(p.status["applications"], 3);
    assert!(!p.status.to_string().contains("password"));
    let policy = json!({"metadata": {"name": "p", "namespace": "n", "uid": "p1"},
        "spec": {"enforcement": "Deny", "targets": ["Application"], "policies": [{"name": "x", "rego": "deny"}]},
        "status": {"compiledPolicies": 1}});
    let p = project(Kind::PolicySet, &policy).unwrap();
    assert_eq!(p.status["compiledPolicies"], 1);
    assert!(!p.status.to_string().contains("rego"));
    let event = json!({"metadata": {"name": "e", "namespace": "n", "uid": "e1"},
        "involvedObject": {"apiVersion": "capstan.dev/v1alpha1", "kind": "Application", "name": "web", "namespace": "n", "uid": "u-1"},
        "reason": "SyncDenied", "type": "Warning", "message": "no", "count": 2});
    let p = project(Kind::Event, &event).unwrap();
    assert_eq!(p.obj_ref.api_version, "v1");
    assert_eq!(p.status["involvedObject"]["name"], "web");
    let mut other = event.clone();
    other["involvedObject"]["apiVersion"] = json!("v1");
    other["involvedObject"]["kind"] = json!("Secret");
    assert_eq!(project(Kind::Event, &other), Err(ProjectError::NotCapstan));
    assert_eq!(project(Kind::Application, &json!({})), Err(ProjectError::NoUid));
}
