//! Cleanup of a deleted Application, one stage per reconcile while its finalizers hold it: the
//! PreDelete hooks, the cascade deletion of the managed resources (see [`deletion`]), the PostDelete
//! hooks (see [`delete_hooks`]). Each stage removes its own finalizer when done.
//!
//! Errors flow as in the pipeline: a Kubernetes request that fails names its step
//! ([`KubeStep::FinalizerPatch`], [`KubeStep::StatusWrite`]); a failed attempt is returned as an
//! [`Error::Reported`] once the `DeletionError` condition says so (after [`deletion::MAX_ATTEMPTS`]
//! attempts), retried after its own backoff ([`DELETION_RETRY_FIRST`] doubling up to
//! [`DELETION_RETRY_MAX`]).

use std::sync::Arc;

use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};

use super::delete_hooks::{self, StageStep};
use super::deletion::{self, Progress};
use super::findings::{DELETION_ERROR_REQUEUE, DELETION_RETRY_FACTOR, DELETION_RETRY_FIRST, DELETION_RETRY_MAX};
use super::pipeline::{target_revision, Pipeline};
use super::status::{self, Problem, StatusInput};
use super::{auto_sync, compare, event_ref, State, CONTROLLER};
use crate::api::Application;
use crate::cluster::{app_instance_id, ClusterError, ResolvedDestination};
use crate::controllers::status::{now, write_status};
use crate::controllers::{Context, Error, ErrorKind, KubeStep};
use crate::engine::plan::delete_hooks::Stage;
use crate::text::short_sha;

/// The cleanup of `app` (see the module doc).
pub async fn cleanup(app: &Application, ctx: &Context, state: &Arc<State>) -> Result<Action, Error> {
    let finalizers = app.finalizers().to_vec();
    let cascade = deletion::cascade_finalizers(app);
    let (pre, post) = (
        Stage::PreDelete.is_held(&finalizers),
        Stage::PostDelete.is_held(&finalizers),
    );
    let ns = app.namespace().unwrap_or_default();
    let api: Api<Application> = Api::namespaced(ctx.client.clone(), &ns);
    if cascade.is_empty() && !pre && !post {
        state.forget(ctx, app);
        return Ok(Action::await_change());
    }
    if deletion::orphan_requested(app) {
        return release(
            app,
            ctx,
            state,
            &api,
            "deletion-policy orphan: managed resources left in place, no deletion hooks run",
        )
        .await;
    }
    let Some(clusters) = ctx.clusters() else {
        return Err(Error::Internal("no cluster clients configured".into()));
    };
    let dest = match clusters.resolve(&ns, &app.spec.destination).await {
        Ok(d) => d,
        Err(ClusterError::NotFound(m)) => {
            let note = format!("destination gone ({m}); managed resources cannot be deleted and are left behind");
            ctx.publish_event(&event_ref(app), EventType::Warning, "DestinationGone", "Delete", &note)
                .await;
            return release(app, ctx, state, &api, "destination gone").await;
        }
        Err(e) => return deletion_failure(app, state, &api, Problem::from_cluster(&e)).await,
    };
    if pre {
        return hook_stage(Stage::PreDelete, app, ctx, state, &api, &dest).await;
    }
    if !cascade.is_empty() {
        return cascade_stage(app, ctx, state, &api, &dest, (&cascade, post)).await;
    }
    hook_stage(Stage::PostDelete, app, ctx, state, &api, &dest).await
}

/// One step of the cascade deletion of the managed resources (`post`: PostDelete hooks follow).
async fn cascade_stage(
    app: &Application,
    ctx: &Context,
    state: &Arc<State>,
    api: &Api<Application>,
    dest: &ResolvedDestination,
    (cascade, post): (&[String], bool),
) -> Result<Action, Error> {
    let ns = app.namespace().unwrap_or_default();
    let instance = app_instance_id(&ns, &app.name_any());
    let previous = app.status.as_ref().map(|s| s.resources.as_slice()).unwrap_or_default();
    let kinds = compare::kinds_to_watch(&[], previous);
    let view = compare::observe(&dest.cluster, &instance, &kinds, &[], "").await;
    if !view.complete {
        return Ok(Action::requeue(deletion::DELETE_POLL));
    }
    let propagation = deletion::propagation(cascade);
    match deletion::delete_tracked(&dest.cluster, &ns, &app.name_any(), &view.own, propagation).await {
        Ok(Progress::Done) if post => {
            let names: Vec<&str> = cascade.iter().map(String::as_str).collect();
            deletion::remove_finalizers(api, app, &names)
                .await
                .map_err(KubeStep::FinalizerPatch.err())?;
            Ok(Action::requeue(delete_hooks::HOOK_POLL))
        }
        Ok(Progress::Done) => release(app, ctx, state, api, "managed resources deleted").await,
        Ok(Progress::Deleting(_) | Progress::Waiting) => Ok(Action::requeue(deletion::DELETE_POLL)),
        Err(e) => deletion_failure(app, state, api, Problem::from_cluster(&e)).await,
    }
}

/// One step of a deletion hook stage: renders the manifests at the synced revision, creates or waits
/// for the stage's hooks, and when they completed removes the stage's finalizers, then the hooks.
async fn hook_stage(
    stage: Stage,
    app: &Application,
    ctx: &Context,
    state: &Arc<State>,
    api: &Api<Application>,
    dest: &ResolvedDestination,
) -> Result<Action, Error> {
    let pipeline = Pipeline::new(app, ctx, state)?;
    let synced = app
        .status
        .as_ref()
        .and_then(|s| s.sync.as_ref())
        .and_then(|s| s.revision.clone())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| target_revision(&app.spec.source));
    let rendered = match pipeline.render(&app.spec.source, &synced, false, false).await {
        Ok(r) => r,
        Err(p) => {
            let message = format!(
                "{stage:?} hooks: the manifests at {} cannot be rendered: {}",
                short_sha(&synced),
                p.message
            );
            return deletion_failure(app, state, api, Problem::of_kind(p.kind, p.reason, message)).await;
        }
    };
    let dest_ns = app.spec.destination.namespace.clone().unwrap_or_default();
    let owner = (pipeline.ns.as_str(), pipeline.name.as_str());
    let step = delete_hooks::advance(stage, &dest.cluster, owner, &rendered.objects, &dest_ns).await;
    match step {
        Ok(StageStep::Waiting) => Ok(Action::requeue(deletion::DELETE_POLL)),
        Ok(StageStep::Running(created)) => {
            if !created.is_empty() {
                let note = format!("running {stage:?} hook(s): {}", created.join(", "));
                ctx.publish_event(
                    &event_ref(app),
                    EventType::Normal,
                    "DeletionHooksRunning",
                    "Delete",
                    &note,
                )
                .await;
            }
            Ok(Action::requeue(delete_hooks::HOOK_POLL))
        }
        Ok(StageStep::Failed(message)) => {
            let message = report_deletion_error(app, api, &message).await?;
            Err(Error::Reported {
                category: DELETION_FAILED,
                message,
                retry: ErrorKind::Waiting(DELETION_ERROR_REQUEUE),
            })
        }
        Ok(StageStep::Done(hooks)) => hooks_done(stage, app, ctx, state, api, dest, hooks).await,
        Err(e) => deletion_failure(app, state, api, Problem::from_cluster(&e)).await,
    }
}

/// A finished hook stage: its finalizers go first (once gone, no reconcile runs the stage again, so a
/// hook never runs twice even if deleting it fails), then its hooks.
async fn hooks_done(
    stage: Stage,
    app: &Application,
    ctx: &Context,
    state: &Arc<State>,
    api: &Api<Application>,
    dest: &ResolvedDestination,
    hooks: Vec<Arc<serde_json::Value>>,
) -> Result<Action, Error> {
    deletion::remove_finalizers(api, app, &stage.finalizers())
        .await
        .map_err(KubeStep::FinalizerPatch.err())?;
    delete_hooks::delete_hooks(&dest.cluster, &hooks).await;
    if !hooks.is_empty() {
        let note = format!("{stage:?} hooks completed");
        ctx.publish_event(
            &event_ref(app),
            EventType::Normal,
            "DeletionHooksCompleted",
            "Delete",
            &note,
        )
        .await;
    }
    let later_stages = !deletion::cascade_finalizers(app).is_empty()
        || (stage == Stage::PreDelete && Stage::PostDelete.is_held(app.finalizers()));
    if later_stages {
        return Ok(Action::requeue(delete_hooks::HOOK_POLL));
    }
    state.forget(ctx, app);
    Ok(Action::await_change())
}

/// Removes every finalizer Capstan handles (cascade and deletion hooks) and forgets the Application.
async fn release(
    app: &Application,
    ctx: &Context,
    state: &Arc<State>,
    api: &Api<Application>,
    why: &str,
) -> Result<Action, Error> {
    let mut names: Vec<&str> = deletion::CASCADE_FINALIZERS.to_vec();
    names.extend(Stage::PreDelete.finalizers());
    names.extend(Stage::PostDelete.finalizers());
    deletion::remove_finalizers(api, app, &names)
        .await
        .map_err(KubeStep::FinalizerPatch.err())?;
    tracing::info!(
        controller = CONTROLLER,
        namespace = app.namespace(),
        name = app.name_any(),
        "finalizers removed: {why}"
    );
    state.forget(ctx, app);
    Ok(Action::await_change())
}

/// The reason of the `DeletionError` condition.
const DELETION_FAILED: &str = "DeletionFailed";

/// A failed deletion attempt: after [`deletion::MAX_ATTEMPTS`] the `DeletionError` condition says so
/// and how to get out; attempts continue with backoff.
async fn deletion_failure(
    app: &Application,
    state: &Arc<State>,
    api: &Api<Application>,
    problem: Problem,
) -> Result<Action, Error> {
    let attempts = state.deletion_failed(app);
    if attempts >= deletion::MAX_ATTEMPTS {
        let message = format!("cascade deletion failed {attempts} times: {}", problem.message);
        report_deletion_error(app, api, &message).await?;
    }
    let delay = auto_sync::backoff(
        DELETION_RETRY_FIRST,
        DELETION_RETRY_FACTOR,
        DELETION_RETRY_MAX,
        attempts,
    );
    Err(Error::Reported {
        category: problem.reason,
        message: problem.message,
        retry: ErrorKind::Waiting(delay),
    })
}

/// Writes the `DeletionError` condition with `message` and the ways out (a failed hook may be fixed
/// by hand, or the Application annotated to be orphaned); returns the condition's message.
async fn report_deletion_error(app: &Application, api: &Api<Application>, message: &str) -> Result<String, Error> {
    let message = format!(
        "{message}. Fix the cause, or leave the resources behind with \
         `kubectl annotate capp {} capstan.dev/deletion-policy=orphan`, or remove the finalizers with \
         `kubectl patch capp {} --type=json -p='[{{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}}]'`",
        app.name_any(),
        app.name_any()
    );
    let input = StatusInput {
        old: app.status.as_ref(),
        generation: app.metadata.generation,
        spec: &app.spec,
        compared: None,
        comparison_error: None,
        operation_state: None,
        record_history: false,
        sync_error: None,
        dependency: None,
        deletion_error: Some(Problem::new(DELETION_FAILED, message.clone())),
        invalid_spec: None,
        policy_denied: None,
        policy_warning: None,
        now: now(),
    };
    let new = status::compute(&input);
    write_status(api, app, app.status.as_ref(), &new)
        .await
        .map_err(KubeStep::StatusWrite.err())?;
    Ok(message)
}
