//! Repository controller: one `ls-remote` per Repository per poll, never a fetch when refs are
//! unchanged; `Ready` with `lastFetchedRevision` per tracked ref, or `Ready=False` with the
//! source error's category; revision changes handed to the [`RevisionNotifier`](super::notifier::RevisionNotifier).
//!
//! # Pipeline (one reconcile)
//! 1. **validate** (no client): `pollInterval` and `url` parse, else `Stalled` (await a change);
//! 2. **credentials** (client): the `secretRef` Secret, or the best credential template
//!    ([`template_serves`]: same namespace, or the operator namespace for everyone);
//! 3. **list** (git): `ls-remote` under a deadline, counted in `capstan_git_request_*`;
//! 4. **resolve** (no client): tracked refs = `HEAD`, the default branch and every ref consumers
//!    [`track`](super::notifier::RevisionNotifier::track) → [`resolve_refs`];
//! 5. **verify** (git, only with `verification.mode: Head`): commits not verified before are
//!    fetched and their signature checked; failures keep the last good revisions;
//! 6. **status** (client): [`next_status`] → ONE server-side apply, none when unchanged;
//! 7. **publish**: changed refs go to the notifier, transitions become events ([`events_for`]);
//! 8. requeue after `pollInterval`; errors go through `error_policy`.
//!
//! Triggers: Repository spec changes (generation predicate, so status writes do not loop), changes
//! of Secrets that Repositories reference (a metadata-only watch: Secret contents are fetched on
//! demand and never cached), and refresh requests (webhooks, newly tracked refs).
//!
//! Credentials never leave this module except towards the Git source: every message is passed
//! through [`sanitize`] (credential values scrubbed, URL userinfo and queries stripped, truncated).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{predicates, watcher, WatchStreamExt};
use kube::{Resource, ResourceExt};
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::error::{Error, KubeStep};
use super::notifier::{repository_serves, url_key, RevisionChange, HEAD};
use super::status::{self, find_condition, mark_not_ready, mark_ready, MAX_MESSAGE_LEN};
use super::{parse_duration, run_controller, Context, Shutdown};
use crate::api::conditions::{CONDITION_READY, REASON_INVALID_SPEC, STATUS_TRUE};
use crate::api::repository::{FetchedRevision, RepositoryStatus, VerificationMode};
use crate::api::Repository;
use crate::metrics::{repo_label, GIT_FETCH, GIT_LS_REMOTE};
use crate::source::credentials::{best_template, template_matches};
use crate::source::url::strip_userinfo_and_query;
use crate::source::{Commit, CredentialTemplate, Credentials, RemoteRef, RepoUrl, Revision, SourceError};
use crate::text::{short_sha, truncate};

/// The controller's name in `--controllers`, metrics and logs.
pub const CONTROLLER: &str = "repository";
/// Event reason when a Repository becomes Ready.
pub const EVENT_READY: &str = "RepositoryReady";
/// Event reason when a tracked ref moves.
pub const EVENT_NEW_REVISION: &str = "NewRevision";
/// Requeue when `pollInterval` cannot be used.
const FALLBACK_POLL: Duration = Duration::from_secs(60);
/// Bound on remembered signature verifications.
const MAX_VERIFIED: usize = 10_000;

/// `(url key, commit, keys digest)` → verification outcome (`Err` holds a sanitized message).
type Verified = HashMap<(String, String, u64), Result<(), String>>;

/// Controller-local state shared by reconciles.
#[derive(Default)]
struct State {
    /// Signature verifications already made.
    verified: Mutex<Verified>,
    /// The Repository store (credential templates are looked up here).
    store: std::sync::OnceLock<Store<Repository>>,
    /// Repositories reconciled since the process started (`namespace/name`).
    seen: Mutex<std::collections::HashSet<String>>,
    /// Repositories a refresh (webhook, newly tracked ref) asked to poll now.
    forced: Mutex<std::collections::HashSet<String>>,
}

impl State {
    /// Whether this is the first reconcile of `key` since the process started.
    fn first_reconcile(&self, key: &str) -> bool {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string())
    }

    /// Records a refresh request for `repo`.
    fn force(&self, repo: &ObjectRef<Repository>) {
        let key = format!("{}/{}", repo.namespace.as_deref().unwrap_or_default(), repo.name);
        self.forced.lock().unwrap_or_else(|p| p.into_inner()).insert(key);
    }

    /// Takes (clears) the refresh request for `key`.
    fn take_forced(&self, key: &str) -> bool {
        self.forced.lock().unwrap_or_else(|p| p.into_inner()).remove(key)
    }

    /// The wait until `repo`'s next poll slot (see [`schedule`]): its rank among the polled
    /// Repositories sharing its interval, spaced evenly over the interval.
    fn until_next_poll(&self, repo: &Repository, poll: Duration) -> Duration {
        let key = object_key(repo);
        let peers: Vec<String> = self
            .store
            .get()
            .map(|store| {
                store
                    .state()
                    .iter()
                    .filter(|r| !r.spec.credential_template)
                    .filter(|r| parse_duration(&r.spec.poll_interval).ok() == Some(poll))
                    .map(|r| object_key(r))
                    .collect()
            })
            .unwrap_or_default();
        let (rank, total) = schedule::rank(&key, peers.iter().map(String::as_str));
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        schedule::until_slot(schedule::slot_phase(rank, total, poll), poll, now_ms)
    }
}

/// `namespace/name`.
fn object_key(repo: &Repository) -> String {
    format!("{}/{}", repo.namespace().unwrap_or_default(), repo.name_any())
}

/// What `repo`'s status says about its last poll.
fn freshness(repo: &Repository) -> schedule::Freshness {
    let status = repo.status.as_ref();
    schedule::Freshness {
        ready: status.is_some_and(|s| status::is_condition(&s.conditions, CONDITION_READY, STATUS_TRUE)),
        observed_generation: status.and_then(|s| s.observed_generation),
        generation: repo.metadata.generation,
    }
}

/// Runs the Repository controller until `shutdown` fires.
pub async fn run(ctx: Arc<Context>, shutdown: Shutdown) -> anyhow::Result<()> {
    let refresh = ctx
        .notifier
        .take_refresh_receiver()
        .ok_or_else(|| anyhow::anyhow!("the repository controller can only be started once"))?;
    let (reader, writer) = reflector::store();
    let repositories = ctx
        .watch::<Repository>(watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    // Metadata only: which Secret changed, never its data (fetched on demand by name).
    let secrets = ctx
        .watch::<PartialObjectMeta<Secret>>(watcher::Config::default())
        .default_backoff()
        .touched_objects();
    ctx.notifier.attach_repositories(reader.clone());
    let state = Arc::new(State::default());
    let _ = state.store.set(reader.clone());
    let refreshes = Arc::clone(&state);

    let (mapper_store, operator_ns) = (reader.clone(), ctx.namespace().to_string());
    let queue = ctx.queue(CONTROLLER);
    let controller = Controller::for_stream(queue.count(repositories), reader.clone())
        .watches_stream(
            secrets,
            queue.mapper(move |secret: PartialObjectMeta<Secret>| {
                repositories_using_secret(&mapper_store.state(), &secret, &operator_ns)
            }),
        )
        .reconcile_on(queue.refs(UnboundedReceiverStream::new(refresh).map(move |r| {
            refreshes.force(&r);
            r
        })))
        .graceful_shutdown_on(shutdown.wait());

    super::mark_ready_when_synced(Arc::clone(&ctx), CONTROLLER, reader.clone());

    run_controller(controller, CONTROLLER, ctx, move |repo, ctx| {
        let state = Arc::clone(&state);
        async move { reconcile(&repo, &ctx, &state).await }
    })
    .await;
    Ok(())
}

/// What one look at the repository found; [`next_status`] turns it into a status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// The refs were listed (and verified, when asked).
    Listed {
        /// Resolved tracked refs, sorted by ref.
        revisions: Vec<FetchedRevision>,
    },
    /// Listing or verification failed; `reason` is the error category, `message` sanitized.
    Failed {
        /// `AuthenticationFailed`, `HostKeyUnknown`, `NotFound`, `Timeout`, `TLSError`, ...
        reason: &'static str,
        /// Sanitized message.
        message: String,
    },
    /// The spec cannot work as written.
    Invalid {
        /// `InvalidSpec`, or the rule that refused it (`TransportNotAllowed`).
        reason: &'static str,
        /// Sanitized message.
        message: String,
    },
    /// A credential template: not polled itself.
    Template,
}

/// The status after `observation` (pure). Last good revisions and `lastFetchedAt` survive failures.
pub fn next_status(
    old: Option<&RepositoryStatus>,
    observation: &Observation,
    generation: Option<i64>,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> RepositoryStatus {
    let mut status = old.cloned().unwrap_or_default();
    status.observed_generation = generation;
    let conds = &mut status.conditions;
    match observation {
        Observation::Listed { revisions } => {
            mark_ready(conds, &ready_message(revisions), generation, now);
            status.last_fetched_revision = revisions.clone();
            status.last_error = None;
            status.last_fetched_at = Some(now.clone());
        }
        Observation::Failed { reason, message } => {
            mark_not_ready(conds, (reason, message), false, generation, now);
            status.last_error = Some(truncate(message, MAX_MESSAGE_LEN));
        }
        Observation::Invalid { reason, message } => {
            mark_not_ready(conds, (reason, message), true, generation, now);
            status.last_error = Some(truncate(message, MAX_MESSAGE_LEN));
        }
        Observation::Template => {
            let message = "credential template: supplies credentials to repository URLs under it; not polled";
            mark_ready(conds, message, generation, now);
            status.last_fetched_revision.clear();
            status.last_error = None;
            status.last_fetched_at = None;
        }
    }
    status
}

fn ready_message(revisions: &[FetchedRevision]) -> String {
    match revisions.iter().find(|r| r.ref_ == HEAD) {
        Some(head) => format!(
            "listed {} tracked ref(s); HEAD at {}",
            revisions.len(),
            short_sha(&head.revision)
        ),
        None => format!("listed {} tracked ref(s)", revisions.len()),
    }
}

/// The refs whose commit differs from the last listing (new refs included), as notifier changes.
pub fn revision_changes(
    namespace: &str,
    url: &str,
    old: &[FetchedRevision],
    new: &[FetchedRevision],
) -> Vec<RevisionChange> {
    let before: BTreeMap<&str, &str> = old.iter().map(|r| (r.ref_.as_str(), r.revision.as_str())).collect();
    new.iter()
        .filter(|r| before.get(r.ref_.as_str()) != Some(&r.revision.as_str()))
        .map(|r| RevisionChange {
            namespace: namespace.to_string(),
            url: url.to_string(),
            ref_: r.ref_.clone(),
            revision: r.revision.clone(),
            previous: before.get(r.ref_.as_str()).map(|s| s.to_string()),
        })
        .collect()
}

/// One event to publish: type, reason, note.
pub type PlannedEvent = (EventType, String, String);

/// Events for a status change (pure): one per `Ready` transition (status or reason changed), and
/// one `NewRevision` when tracked refs moved after a previous listing.
pub fn events_for(
    old: Option<&RepositoryStatus>,
    new: &RepositoryStatus,
    changes: &[RevisionChange],
) -> Vec<PlannedEvent> {
    let mut events = Vec::new();
    let before = old.and_then(|s| find_condition(&s.conditions, CONDITION_READY));
    if let Some(now) = find_condition(&new.conditions, CONDITION_READY) {
        let transitioned = before.is_none_or(|b| b.status != now.status || b.reason != now.reason);
        if transitioned {
            if now.status == STATUS_TRUE {
                events.push((EventType::Normal, EVENT_READY.to_string(), now.message.clone()));
            } else {
                events.push((EventType::Warning, now.reason.clone(), now.message.clone()));
            }
        }
    }
    let had_revisions = old.is_some_and(|s| !s.last_fetched_revision.is_empty());
    let moved: Vec<String> = changes
        .iter()
        .filter(|c| c.previous.is_some())
        .map(|c| {
            format!(
                "{}: {} -> {}",
                c.ref_,
                short_sha(c.previous.as_deref().unwrap_or_default()),
                short_sha(&c.revision)
            )
        })
        .collect();
    if had_revisions && !moved.is_empty() {
        events.push((EventType::Normal, EVENT_NEW_REVISION.to_string(), moved.join("; ")));
    }
    events
}

/// The refs a Repository lists: `HEAD`, the default branch (what the remote's `HEAD` points to,
/// short name) and every ref consumers track.
pub fn tracked_refs(remote: &[RemoteRef], consumers: BTreeSet<String>) -> BTreeSet<String> {
    let mut refs = consumers;
    refs.insert(HEAD.to_string());
    if let Some(target) = remote
        .iter()
        .find(|r| r.name == HEAD)
        .and_then(|r| r.symref_target.as_deref())
    {
        refs.insert(target.strip_prefix("refs/heads/").unwrap_or(target).to_string());
    }
    refs
}

/// Resolves each tracked ref against the advertised refs (pure). Branches win over tags (as in
/// Argo CD); annotated tags resolve to the commit they point at; full SHAs and refs the remote does
/// not have are left out.
pub fn resolve_refs(tracked: &BTreeSet<String>, remote: &[RemoteRef]) -> Vec<FetchedRevision> {
    let by_name: HashMap<&str, &str> = remote.iter().map(|r| (r.name.as_str(), r.sha.as_str())).collect();
    let mut out = Vec::new();
    for name in tracked {
        let Ok(revision) = Revision::parse(name) else {
            continue;
        };
        if revision.is_full_sha() {
            continue;
        }
        let found = revision.candidate_refs().into_iter().find_map(|candidate| {
            let peeled = format!("{candidate}^{{}}");
            by_name
                .get(peeled.as_str())
                .or_else(|| by_name.get(candidate.as_str()))
                .map(|sha| sha.to_string())
        });
        if let Some(sha) = found {
            out.push(FetchedRevision {
                ref_: name.clone(),
                revision: sha,
            });
        }
    }
    out
}

/// Whether a credential template in `template_namespace` may serve a Repository in
/// `repo_namespace`: its own namespace, or everyone when it lives in the operator namespace.
pub fn template_serves(template_namespace: &str, repo_namespace: &str, operator_namespace: &str) -> bool {
    repository_serves(template_namespace, repo_namespace, operator_namespace)
}

/// The credential templates that may serve `repo` (in namespace `ns`), best candidates first on a
/// tie: same namespace before the operator namespace, then by name.
pub fn eligible_templates<'a>(all: &'a [Arc<Repository>], ns: &str, operator_ns: &str) -> Vec<&'a Arc<Repository>> {
    let mut out: Vec<&Arc<Repository>> = all
        .iter()
        .filter(|t| t.spec.credential_template)
        .filter(|t| template_serves(&t.namespace().unwrap_or_default(), ns, operator_ns))
        .filter(|t| super::git_access::repository_permits(t, ns, operator_ns))
        .collect();
    out.sort_by_key(|t| (t.namespace().as_deref() != Some(ns), t.namespace(), t.name_any()));
    out
}

/// The best template for `url` among `candidates` (boundary-respecting prefix, longest wins).
pub fn pick_template<'a>(candidates: &[&'a Arc<Repository>], url: &RepoUrl) -> Option<&'a Arc<Repository>> {
    let parsed: Vec<(CredentialTemplate, &Arc<Repository>)> = candidates
        .iter()
        .filter_map(|t| {
            RepoUrl::parse(&t.spec.url).ok().map(|u| {
                (
                    CredentialTemplate {
                        url: u,
                        credentials: Credentials::default(),
                    },
                    *t,
                )
            })
        })
        .collect();
    let templates: Vec<CredentialTemplate> = parsed.iter().map(|(t, _)| t.clone()).collect();
    let best = best_template(&templates, url)?;
    let index = templates.iter().position(|t| std::ptr::eq(t, best))?;
    Some(parsed[index].1)
}

/// The Repositories to reconcile when Secret `secret` changes: those referencing it, and for a
/// credential template referencing it, every Repository the template may serve.
pub fn repositories_using_secret(
    all: &[Arc<Repository>],
    secret: &PartialObjectMeta<Secret>,
    operator_ns: &str,
) -> Vec<ObjectRef<Repository>> {
    let (ns, name) = (secret.namespace().unwrap_or_default(), secret.name_any());
    let mut out = Vec::new();
    for repo in all {
        let repo_ns = repo.namespace().unwrap_or_default();
        if repo_ns != ns || repo.spec.secret_ref.as_ref().is_none_or(|r| r.name != name) {
            continue;
        }
        out.push(ObjectRef::from_obj(repo.as_ref()));
        if repo.spec.credential_template {
            out.extend(served_by_template(all, repo, operator_ns));
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|r| seen.insert(r.clone()));
    out
}

/// The non-template Repositories `template` may serve and whose URL it prefixes.
fn served_by_template(all: &[Arc<Repository>], template: &Repository, operator_ns: &str) -> Vec<ObjectRef<Repository>> {
    let Ok(prefix) = RepoUrl::parse(&template.spec.url) else {
        return Vec::new();
    };
    let template_ns = template.namespace().unwrap_or_default();
    all.iter()
        .filter(|r| !r.spec.credential_template)
        .filter(|r| template_serves(&template_ns, &r.namespace().unwrap_or_default(), operator_ns))
        .filter(|r| RepoUrl::parse(&r.spec.url).is_ok_and(|u| template_matches(&prefix, &u)))
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

/// Makes text safe for status, events, logs and metrics: credential values scrubbed, URL userinfo
/// and queries stripped, length bounded.
pub fn sanitize(creds: &Credentials, text: &str) -> String {
    // Strip URLs first: scrubbing inserts `<redacted>`, whose `<` would end a URL token early.
    truncate(&creds.scrub(&strip_userinfo_and_query(text)), MAX_MESSAGE_LEN)
}

/// Everything a reconcile needs after validation.
#[derive(Debug)]
struct Validated {
    url: RepoUrl,
    key: String,
    poll: Duration,
}

fn validate(repo: &Repository) -> Result<Validated, String> {
    let poll = parse_duration(&repo.spec.poll_interval).map_err(|e| format!("pollInterval: {e}"))?;
    if poll < Duration::from_secs(1) {
        return Err("pollInterval must be at least 1s".into());
    }
    let url = RepoUrl::parse(&repo.spec.url).map_err(|e| format!("url: {e}"))?;
    let key = url_key(&repo.spec.url).ok_or_else(|| "url: cannot be normalized".to_string())?;
    validate_proxy_field(repo)?;
    Ok(Validated { url, key, poll })
}

/// `url` under the URL policy for the Repository's namespace (a credential template's prefix included:
/// it supplies credentials only to URLs that may be used there anyway). The error is the status reason
/// and message.
fn check_url_policy(ctx: &Context, repo: &Repository, url: &RepoUrl) -> Result<(), (&'static str, String)> {
    let ns = repo.namespace().unwrap_or_default();
    ctx.url_policy()
        .check(url, &ns)
        .map_err(|e| (e.category(), format!("url: {e}")))
}

fn validate_proxy_field(repo: &Repository) -> Result<(), String> {
    match repo.spec.proxy.as_deref() {
        Some(p) => crate::source::http::validate_proxy(p).map_err(|e| format!("proxy: {e}")),
        None => Ok(()),
    }
}

/// One reconcile of a Repository: check the spec, resolve the credentials, list the remote (verifying
/// the tracked commits when asked), write the status, then publish the tracked refs that moved.
async fn reconcile(repo: &Repository, ctx: &Context, state: &State) -> Result<Action, Error> {
    let ns = repo
        .namespace()
        .ok_or_else(|| Error::InvalidSpec("a Repository must be namespaced".into()))?;
    let api: Api<Repository> = Api::namespaced(ctx.client.clone(), &ns);
    let old = repo.status.as_ref();
    if repo.spec.credential_template {
        return reconcile_template(repo, ctx, state, &api).await;
    }

    let Validated { url, key, poll } = match validate(repo) {
        Ok(v) => v,
        Err(message) => return invalid_spec(ctx, &api, repo, (REASON_INVALID_SPEC, &message)).await,
    };
    if let Err((reason, message)) = check_url_policy(ctx, repo, &url) {
        return invalid_spec(ctx, &api, repo, (reason, &message)).await;
    }
    let object = object_key(repo);
    let (first, forced) = (state.first_reconcile(&object), state.take_forced(&object));
    if !schedule::poll_now(first, forced, freshness(repo)) {
        // Restarted with a settled listing: keep this Repository's slot instead of joining a herd.
        return Ok(Action::requeue(state.until_next_poll(repo, poll)));
    }
    let creds = match resolve_credentials(ctx, state, repo, &ns, &url).await {
        Ok(c) => c,
        Err(e) => return credentials_failed(ctx, &api, repo, e, poll).await,
    };

    let remote = Remote {
        repo,
        ns: &ns,
        url: &url,
        key: &key,
        creds: &creds,
    };
    let looked = look(ctx, state, &remote).await;
    let transient = looked.as_ref().err().is_some_and(SourceError::is_transient);
    let observation = match looked {
        Ok(revisions) => Observation::Listed { revisions },
        Err(e) => Observation::Failed {
            reason: e.category(),
            message: sanitize(&creds, &e.to_string()),
        },
    };
    let changes = match &observation {
        Observation::Listed { revisions } => revision_changes(
            &ns,
            &key,
            old.map(|s| s.last_fetched_revision.as_slice()).unwrap_or_default(),
            revisions,
        ),
        _ => Vec::new(),
    };
    finish(ctx, &api, repo, &observation, &changes).await?;
    match observation {
        Observation::Failed { reason, message } => Err(Error::Git {
            category: reason,
            message,
            transient,
            retry_after: poll,
        }),
        _ => Ok(Action::requeue(state.until_next_poll(repo, poll))),
    }
}

/// An invalid spec: the status says why; the error is permanent (the next change of the spec wakes
/// the Repository).
async fn invalid_spec(
    ctx: &Context,
    api: &Api<Repository>,
    repo: &Repository,
    (reason, message): (&'static str, &str),
) -> Result<Action, Error> {
    let message = sanitize(&Credentials::default(), message);
    let observation = Observation::Invalid {
        reason,
        message: message.clone(),
    };
    finish(ctx, api, repo, &observation, &[]).await?;
    Err(Error::InvalidSpec(message))
}

/// The credentials cannot be resolved: a dependency failure goes to the status and is retried no later
/// than the next poll; any other error is returned as it is.
async fn credentials_failed(
    ctx: &Context,
    api: &Api<Repository>,
    repo: &Repository,
    error: Error,
    poll: Duration,
) -> Result<Action, Error> {
    let Error::Dependency {
        category,
        message,
        retry_after,
    } = error
    else {
        return Err(error);
    };
    let observation = Observation::Failed {
        reason: category,
        message: message.clone(),
    };
    finish(ctx, api, repo, &observation, &[]).await?;
    Err(Error::Dependency {
        category,
        message,
        retry_after: retry_after.min(poll),
    })
}

/// A credential template: only its URL and proxy are checked (it is never listed); the Repositories it
/// serves are refreshed, since their credentials may have changed.
async fn reconcile_template(
    repo: &Repository,
    ctx: &Context,
    state: &State,
    api: &Api<Repository>,
) -> Result<Action, Error> {
    let invalid = |message| Observation::Invalid {
        reason: REASON_INVALID_SPEC,
        message,
    };
    let observation = match RepoUrl::parse(&repo.spec.url) {
        Ok(url) => match (check_url_policy(ctx, repo, &url), validate_proxy_field(repo)) {
            (Err((reason, message)), _) => Observation::Invalid { reason, message },
            (Ok(()), Err(message)) => invalid(message),
            (Ok(()), Ok(())) => Observation::Template,
        },
        Err(e) => invalid(format!("url: {}", sanitize(&Credentials::default(), &e.to_string()))),
    };
    finish(ctx, api, repo, &observation, &[]).await?;
    if let Some(store) = state.store.get() {
        for dependent in served_by_template(&store.state(), repo, ctx.namespace()) {
            ctx.notifier.refresh(dependent);
        }
    }
    match observation {
        Observation::Invalid { message, .. } => Err(Error::InvalidSpec(message)),
        _ => Ok(Action::await_change()),
    }
}

/// Writes the status for `observation`, then publishes revision changes and transition events.
async fn finish(
    ctx: &Context,
    api: &Api<Repository>,
    repo: &Repository,
    observation: &Observation,
    changes: &[RevisionChange],
) -> Result<(), Error> {
    let old = repo.status.as_ref();
    let new = next_status(old, observation, repo.metadata.generation, &status::now());
    status::write_status(api, repo, old, &new)
        .await
        .map_err(KubeStep::StatusWrite.err())?;
    let ready = find_condition(&new.conditions, CONDITION_READY).is_some_and(|c| c.status == STATUS_TRUE);
    ctx.metrics
        .repository_ready
        .with_label_values(&[&repo.namespace().unwrap_or_default(), &repo.name_any()])
        .set(i64::from(ready));
    for change in changes {
        tracing::info!(
            controller = CONTROLLER,
            namespace = change.namespace,
            repository = repo.name_any(),
            ref_ = change.ref_,
            revision = change.revision,
            "tracked ref moved"
        );
        ctx.notifier.publish(change.clone());
    }
    let reference = repo.object_ref(&());
    for (type_, reason, note) in events_for(old, &new, changes) {
        ctx.publish_event(&reference, type_, &reason, "Reconcile", &note).await;
    }
    Ok(())
}

/// Credentials for `repo` (see [`crate::controllers::git_access::credentials`]); a Secret that cannot be read is a dependency.
async fn resolve_credentials(
    ctx: &Context,
    state: &State,
    repo: &Repository,
    ns: &str,
    url: &RepoUrl,
) -> Result<Credentials, Error> {
    let all = state.store.get().map(|s| s.state()).unwrap_or_default();
    crate::controllers::git_access::credentials(ctx, &all, Some(repo), ns, url)
        .await
        .map_err(|e| Error::Dependency {
            category: e.category,
            message: e.message,
            retry_after: FALLBACK_POLL,
        })
}

/// The repository a reconcile looks at: the Repository, its namespace, its URL (parsed and as the
/// notifier's key) and the credentials to reach it.
struct Remote<'a> {
    repo: &'a Repository,
    ns: &'a str,
    url: &'a RepoUrl,
    key: &'a str,
    creds: &'a Credentials,
}

/// Lists the remote, resolves the tracked refs and verifies them when asked.
async fn look(ctx: &Context, state: &State, target: &Remote<'_>) -> Result<Vec<FetchedRevision>, SourceError> {
    let Remote {
        repo,
        ns,
        url,
        key,
        creds,
    } = *target;
    let label = repo_label(&repo.spec.url);
    let started = Instant::now();
    let listed = tokio::time::timeout(ctx.settings.git_timeout, ctx.git.ls_remote(url, creds))
        .await
        .unwrap_or_else(|_| {
            Err(SourceError::Timeout(format!(
                "{url}: no answer within {}s",
                ctx.settings.git_timeout.as_secs_f32()
            )))
        });
    let failure = listed.as_ref().err().map(SourceError::category);
    ctx.metrics
        .observe_git(&label, GIT_LS_REMOTE, started.elapsed(), failure);
    let remote = listed?;
    let tracked = tracked_refs(&remote, ctx.notifier.tracked_refs(ns, key));
    let revisions = resolve_refs(&tracked, &remote);
    if let Some(verification) = &repo.spec.verification {
        if verification.mode == VerificationMode::Head {
            verify(ctx, state, target, &revisions, &label).await?;
        }
    }
    Ok(revisions)
}

/// Checks the signature of every listed commit not verified before (a fetch only then).
async fn verify(
    ctx: &Context,
    state: &State,
    target: &Remote<'_>,
    revisions: &[FetchedRevision],
    label: &str,
) -> Result<(), SourceError> {
    let Remote {
        repo, ns, url, creds, ..
    } = *target;
    let Some(cm_ref) = repo
        .spec
        .verification
        .as_ref()
        .and_then(|v| v.keys_config_map_ref.as_ref())
    else {
        return Err(SourceError::VerificationFailed(
            "verification.mode Head needs keysConfigMapRef".into(),
        ));
    };
    let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let keys: Vec<String> = match config_maps.get_opt(&cm_ref.name).await {
        Ok(Some(cm)) => cm.data.unwrap_or_default().into_values().collect(),
        Ok(None) => {
            return Err(SourceError::VerificationFailed(format!(
                "keys ConfigMap {} not found",
                cm_ref.name
            )))
        }
        Err(e) => return Err(SourceError::Internal(format!("reading keys ConfigMap: {e}"))),
    };
    let digest = {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        keys.hash(&mut h);
        h.finish()
    };
    let mut checked = BTreeSet::new();
    for rev in revisions {
        if !checked.insert(rev.revision.clone()) {
            continue;
        }
        let cache_key = (target.key.to_string(), rev.revision.clone(), digest);
        let known = state
            .verified
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&cache_key)
            .cloned();
        let outcome = match known {
            Some(outcome) => outcome,
            None => {
                let outcome = verify_one(ctx, url, creds, &rev.revision, &keys, label).await?;
                let mut verified = state.verified.lock().unwrap_or_else(|p| p.into_inner());
                if verified.len() >= MAX_VERIFIED {
                    verified.clear();
                }
                verified.insert(cache_key, outcome.clone());
                outcome
            }
        };
        if let Err(message) = outcome {
            return Err(SourceError::VerificationFailed(format!(
                "{} ({}): {message}",
                rev.ref_,
                short_sha(&rev.revision)
            )));
        }
    }
    Ok(())
}

/// Fetches one commit and verifies it. `Ok(Err(_))` is a definitive verification failure (cached);
/// `Err(_)` a failure to get the commit (not cached: retried).
async fn verify_one(
    ctx: &Context,
    url: &RepoUrl,
    creds: &Credentials,
    sha: &str,
    keys: &[String],
    label: &str,
) -> Result<Result<(), String>, SourceError> {
    let revision = Revision::parse(sha)?;
    let commit = Commit::parse(sha)?;
    let started = Instant::now();
    let fetched = tokio::time::timeout(ctx.settings.git_timeout, ctx.git.fetch(url, creds, &revision))
        .await
        .unwrap_or_else(|_| Err(SourceError::Timeout(format!("{url}: fetch did not finish in time"))));
    let failure = fetched.as_ref().err().map(SourceError::category);
    ctx.metrics.observe_git(label, GIT_FETCH, started.elapsed(), failure);
    fetched?;
    match ctx.git.verify_commit(url, &commit, keys).await {
        Ok(_) => Ok(Ok(())),
        Err(SourceError::VerificationFailed(message)) => Ok(Err(message)),
        Err(other) => Err(other),
    }
}

mod schedule;
#[cfg(test)]
mod tests;
