//! The order in which a new commit wakes Applications: the monorepo fan-out.
//!
//! One commit to a repository that 1,000 Applications track wakes all 1,000, since each must move to the
//! new commit. Most of them read nothing the commit changed: their reconcile reuses the previous render
//! and applies nothing, but it still costs a comparison and a status write. The few whose files changed
//! must not wait behind them. So the woken Applications are split by the rule the render reuse applies
//! ([`source::render_verdict`] on what each one's last render read):
//! - **urgent**: the commit changed something it reads, or that is not known (never rendered here, the
//!   changed paths unknown): woken at once;
//! - **deferred**: nothing it reads changed: released once the urgent ones' reconciles have started, in
//!   rounds of the reconcile concurrency, a round only when fewer than one round are waiting in the queue,
//!   so urgent work (this commit's or the next one's) never waits behind more than one round of them.
//!
//! The split only orders the work. Every woken Application still decides for itself, in its reconcile,
//! whether to render again, and every one of them is woken.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::reflector::ObjectRef;

use super::source::{self, MAX_CHANGED_PATHS};
use super::State;
use crate::api::Application;
use crate::controllers::notifier::RevisionChange;
use crate::controllers::queue::{ref_key, QueueDepth};
use crate::controllers::Context;
use crate::render::reads::{ReadSet, Verdict};
use crate::source::{ChangedPaths, Commit, RepoUrl};

/// How often the release of deferred Applications looks at the queue.
const RELEASE_POLL: Duration = Duration::from_millis(50);
/// Longest a round of deferred Applications waits for the queue to drain: they are woken regardless
/// after it, so a stuck queue cannot hold them back for ever.
const RELEASE_MAX_WAIT: Duration = Duration::from_secs(10);

/// Wakes `owners` for `change` (`None`: the notifier lagged; everyone at once, as nothing is known).
pub(super) fn wake(
    ctx: &Arc<Context>,
    state: &Arc<State>,
    queue: &Arc<QueueDepth>,
    change: Option<&RevisionChange>,
    owners: Vec<ObjectRef<Application>>,
) {
    let Some(change) = change.filter(|c| c.previous.is_some() && owners.len() > 1) else {
        owners.into_iter().for_each(|r| state.wake(r));
        return;
    };
    let (ctx, state, queue, change) = (Arc::clone(ctx), Arc::clone(state), Arc::clone(queue), change.clone());
    tokio::spawn(async move {
        let apps: Vec<(ObjectRef<Application>, Option<Arc<Application>>)> =
            owners.into_iter().map(|r| (r.clone(), state.application(&r))).collect();
        let started = std::time::Instant::now();
        let changed = changed_paths(&ctx, &state, &apps, &change).await;
        let (urgent, deferred) = split(apps, |app| state.last_reads(app), changed.as_deref());
        tracing::debug!(
            revision = %change.revision,
            urgent = urgent.len(),
            deferred = deferred.len(),
            changed_paths_ms = started.elapsed().as_millis() as u64,
            "new commit: waking Applications, those it concerns first"
        );
        let urgent_keys: Vec<String> = urgent.iter().map(ref_key).collect();
        urgent.into_iter().for_each(|r| state.wake(r));
        wait_started(&queue, &urgent_keys).await;
        release(
            &state,
            &queue,
            usize::from(ctx.settings.app_concurrency.max(1)),
            deferred,
        )
        .await;
    });
}

/// Splits the woken Applications into (urgent, deferred). Pure: `reads` gives what an Application's
/// last render read (`None`: no render known), `changed` the commit's changed paths (`None`: unknown).
pub(super) fn split(
    apps: Vec<(ObjectRef<Application>, Option<Arc<Application>>)>,
    reads: impl Fn(&Application) -> Option<ReadSet>,
    changed: Option<&[String]>,
) -> (Vec<ObjectRef<Application>>, Vec<ObjectRef<Application>>) {
    let mut urgent = Vec::new();
    let mut deferred = Vec::new();
    for (r, app) in apps {
        let can_wait = app.as_deref().is_some_and(|app| {
            reads(app).is_some_and(|reads| {
                source::render_verdict(app, &app.spec.source, &reads, changed) == Verdict::Unchanged
            })
        });
        if can_wait {
            deferred.push(r);
        } else {
            urgent.push(r);
        }
    }
    (urgent, deferred)
}

/// The paths `change` changed, `None` when they cannot be known. The new commit is fetched first through
/// the first Application's source (its credentials and Repository rules): the Repository controller
/// only lists refs, and the urgent reconciles need the commit anyway.
async fn changed_paths(
    ctx: &Context,
    state: &State,
    apps: &[(ObjectRef<Application>, Option<Arc<Application>>)],
    change: &RevisionChange,
) -> Option<Vec<String>> {
    let app = apps.iter().find_map(|(_, a)| a.clone())?;
    let source = &app.spec.source;
    let previous = Commit::parse(change.previous.as_deref()?).ok()?;
    if let Err(p) = source::fetch_commit(ctx, state, &app, source, &change.revision).await {
        tracing::debug!(problem = %p.message, "new commit not fetched; waking every Application at once");
        return None;
    }
    let url = RepoUrl::parse(&source.repo_url).ok()?;
    let to = Commit::parse(&change.revision).ok()?;
    match ctx.git.changed_paths(&url, &previous, &to, MAX_CHANGED_PATHS).await {
        Ok(ChangedPaths::Paths(paths)) => Some(paths),
        Ok(ChangedPaths::TooMany) => None,
        Err(e) => {
            tracing::debug!(error = %e, "changed paths unknown; waking every Application at once");
            None
        }
    }
}

/// Waits until the reconciles of `keys` have started (or [`RELEASE_MAX_WAIT`]): the controller's
/// scheduler does not keep the order objects were triggered in, so deferred ones released at once could
/// still be picked before them.
async fn wait_started(queue: &QueueDepth, keys: &[String]) {
    let deadline = tokio::time::Instant::now() + RELEASE_MAX_WAIT;
    while keys.iter().any(|k| queue.is_pending(k)) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(RELEASE_POLL).await;
    }
}

/// Wakes `deferred` a round of `round` at a time, each round once fewer than `round` objects wait in the
/// queue (or after [`RELEASE_MAX_WAIT`]).
async fn release(state: &State, queue: &QueueDepth, round: usize, deferred: Vec<ObjectRef<Application>>) {
    for chunk in deferred.chunks(round) {
        let deadline = tokio::time::Instant::now() + RELEASE_MAX_WAIT;
        while queue.depth() >= round && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(RELEASE_POLL).await;
        }
        chunk.iter().cloned().for_each(|r| state.wake(r));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::application::ApplicationSource;

    fn app(name: &str, path: &str) -> (ObjectRef<Application>, Option<Arc<Application>>) {
        let mut a = Application::new(name, Default::default());
        a.metadata.namespace = Some("capstan-system".into());
        a.spec.source = ApplicationSource {
            repo_url: "https://git.example/mono.git".into(),
            path: Some(path.into()),
            ..Default::default()
        };
        (ObjectRef::from_obj(&a), Some(Arc::new(a)))
    }

    fn reads_of_path(app: &Application) -> Option<ReadSet> {
        Some(ReadSet {
            paths: vec![app.spec.source.path.clone().unwrap_or_default()],
            uncertain: None,
        })
    }

    fn names(refs: &[ObjectRef<Application>]) -> Vec<String> {
        refs.iter().map(|r| r.name.clone()).collect()
    }

    #[test]
    fn the_application_whose_files_changed_goes_first_the_others_wait() {
        let apps = vec![app("a", "apps/a"), app("b", "apps/b"), app("c", "apps/c")];
        let changed = vec!["apps/b/cm.yaml".to_string()];
        let (urgent, deferred) = split(apps, reads_of_path, Some(&changed));
        assert_eq!(names(&urgent), ["b"]);
        assert_eq!(names(&deferred), ["a", "c"]);
    }

    #[test]
    fn unknown_changes_unknown_reads_or_a_missing_object_wake_at_once() {
        let apps = || vec![app("a", "apps/a"), app("b", "apps/b")];
        let (urgent, deferred) = split(apps(), reads_of_path, None);
        assert_eq!(
            (names(&urgent), deferred.len()),
            (vec!["a".to_string(), "b".to_string()], 0)
        );

        let changed = vec!["elsewhere/x.yaml".to_string()];
        let (urgent, deferred) = split(apps(), |_| None, Some(&changed));
        assert_eq!(
            (urgent.len(), deferred.len()),
            (2, 0),
            "never rendered: nothing is known to be unread"
        );

        let uncertain = |_: &Application| Some(ReadSet::uncertain("a plugin read the repository"));
        let (urgent, _) = split(apps(), uncertain, Some(&changed));
        assert_eq!(urgent.len(), 2);

        let gone = vec![(ObjectRef::new("gone").within("capstan-system"), None)];
        let (urgent, _) = split(gone, reads_of_path, Some(&changed));
        assert_eq!(names(&urgent), ["gone"]);
    }

    #[test]
    fn the_manifest_generate_paths_annotation_decides_when_set() {
        let (r, a) = app("a", "apps/a");
        let mut a = (*a.unwrap()).clone();
        a.metadata.annotations = Some(
            [(
                crate::api::labels::MANIFEST_GENERATE_PATHS_ANNOTATION.to_string(),
                "/shared".to_string(),
            )]
            .into(),
        );
        let changed = vec!["shared/values.yaml".to_string()];
        let (urgent, deferred) = split(vec![(r, Some(Arc::new(a)))], reads_of_path, Some(&changed));
        assert_eq!((urgent.len(), deferred.len()), (1, 0));
    }
}
