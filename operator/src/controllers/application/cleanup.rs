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
use super::{auto_sync, compare, event_ref, identity, State, CONTROLLER};
use crate::api::Application;
use crate::cluster::{ClusterError, ClusterHandle, ResolvedDestination};
use crate::controllers::status::{now, write_status};
use crate::controllers::{Context, Error, ErrorKind, KubeStep};
use crate::engine::plan::delete_hooks::Stage;
use crate::engine::protect::Protection;
use crate::text::{short_sha, truncate};

/// The cleanup of `app` (see the module doc).
pub async fn cleanup(app: &Application, ctx: &Context, state: &Arc<State>) -> Result<Action, Error> {
    let finalizers = app.finalizers().to_vec();
    let cascade = deletion::cascade_finalizers(app);
    let (pre, post) = (
        Stage::PreDelete.is_held(&finalizers),
        Stage::PostDelete.is_held(&finalizers),
    );
    let ns = app.namespace().unwrap_or_default();
    let cleanup = Cleanup {
        app,
        ctx,
        state,
        api: Api::namespaced(ctx.client.clone(), &ns),
    };
    if cascade.is_empty() && !pre && !post {
        state.forget(ctx, app);
        return Ok(Action::await_change());
    }
    if deletion::orphan_requested(app) {
        let why = "deletion-policy orphan: managed resources left in place, no deletion hooks run";
        return cleanup.release(why).await;
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
            return cleanup.release("destination gone").await;
        }
        Err(e) => return cleanup.failure(Problem::from_cluster(&e)).await,
    };
    // Deletion writes as the sync did (identity::writer); without the ServiceAccount nothing is deleted.
    let writer = match identity::writer(ctx, app, &dest.cluster).await {
        Ok(w) => w,
        Err(p) if p.reason == identity::REASON_SA_NOT_FOUND => {
            let note = format!("{}; managed resources are left in place: {}", p.message, orphans(app));
            ctx.publish_event(
                &event_ref(app),
                EventType::Warning,
                "ServiceAccountGone",
                "Delete",
                &note,
            )
            .await;
            return cleanup.release("service account gone").await;
        }
        Err(p) => return cleanup.failure(p).await,
    };
    if pre {
        return cleanup.hook_stage(Stage::PreDelete, &writer).await;
    }
    if !cascade.is_empty() {
        return cleanup.cascade_stage(&dest, &writer, (&cascade, post)).await;
    }
    cleanup.hook_stage(Stage::PostDelete, &writer).await
}

/// The managed resources a cleanup leaves behind, for an event (the first 20).
fn orphans(app: &Application) -> String {
    let resources = app.status.as_ref().map(|s| s.resources.as_slice()).unwrap_or_default();
    let mut names: Vec<String> = resources
        .iter()
        .take(20)
        .map(|r| format!("{}/{}/{}", r.kind, r.namespace.as_deref().unwrap_or_default(), r.name))
        .collect();
    if resources.len() > 20 {
        names.push(format!("and {} more", resources.len() - 20));
    }
    if names.is_empty() {
        return "none recorded".into();
    }
    names.join(", ")
}

/// What every stage of one Application's cleanup works with.
struct Cleanup<'a> {
    app: &'a Application,
    ctx: &'a Context,
    state: &'a Arc<State>,
    api: Api<Application>,
}

impl Cleanup<'_> {
    /// One step of the cascade deletion of the managed resources (`post`: PostDelete hooks follow):
    /// observed with the operator's rights on `dest`, deleted through `writer`.
    async fn cascade_stage(
        &self,
        dest: &ResolvedDestination,
        writer: &ClusterHandle,
        (cascade, post): (&[String], bool),
    ) -> Result<Action, Error> {
        let (ns, name) = (self.app.namespace().unwrap_or_default(), self.app.name_any());
        let view = compare::observe_app(&dest.cluster, self.app, &[], "").await;
        if !view.complete {
            return Ok(Action::requeue(deletion::DELETE_POLL));
        }
        let propagation = deletion::propagation(cascade);
        let who = Protection {
            operator_namespace: &self.ctx.settings.namespace,
            app_namespace: &ns,
            app_name: &name,
        };
        let held = deletion::deletable(&who, &view.own).1;
        if !held.is_empty() {
            // One event for all: the recorder folds repeats of a reason into one series.
            let note = truncate(&held.join("; "), status::MAX_STATUS_MESSAGE);
            self.ctx
                .publish_event(
                    &event_ref(self.app),
                    EventType::Warning,
                    "DeletionGuarded",
                    "Delete",
                    &note,
                )
                .await;
        }
        match deletion::delete_tracked(writer, &who, &view.own, propagation).await {
            Ok(Progress::Done) if post => {
                let names: Vec<&str> = cascade.iter().map(String::as_str).collect();
                self.remove_finalizers(&names).await?;
                Ok(Action::requeue(delete_hooks::HOOK_POLL))
            }
            Ok(Progress::Done) => self.release("managed resources deleted").await,
            Ok(Progress::Deleting(_) | Progress::Waiting) => Ok(Action::requeue(deletion::DELETE_POLL)),
            Err(e) => self.failure(Problem::from_cluster(&e)).await,
        }
    }

    /// One step of a deletion hook stage: renders the manifests at the synced revision, creates or
    /// waits for the stage's hooks, and when they completed removes the stage's finalizers, then the
    /// hooks.
    async fn hook_stage(&self, stage: Stage, writer: &ClusterHandle) -> Result<Action, Error> {
        let app = self.app;
        let pipeline = Pipeline::new(app, self.ctx, self.state)?;
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
                return self.failure(Problem::of_kind(p.kind, p.reason, message)).await;
            }
        };
        let dest_ns = app.spec.destination.namespace.clone().unwrap_or_default();
        let owner = (pipeline.ns.as_str(), pipeline.name.as_str());
        match delete_hooks::advance(stage, writer, owner, &rendered.objects, &dest_ns).await {
            Ok(StageStep::Waiting) => Ok(Action::requeue(deletion::DELETE_POLL)),
            Ok(StageStep::Running(created)) => {
                if !created.is_empty() {
                    let note = format!("running {stage:?} hook(s): {}", created.join(", "));
                    self.event("DeletionHooksRunning", &note).await;
                }
                Ok(Action::requeue(delete_hooks::HOOK_POLL))
            }
            Ok(StageStep::Failed(message)) => {
                let message = self.report_deletion_error(&message).await?;
                Err(Error::Reported {
                    category: DELETION_FAILED,
                    message,
                    retry: ErrorKind::Waiting(DELETION_ERROR_REQUEUE),
                })
            }
            Ok(StageStep::Done(hooks)) => self.hooks_done(stage, writer, hooks).await,
            Err(e) => self.failure(Problem::from_cluster(&e)).await,
        }
    }

    /// A finished hook stage: its finalizers go first (once gone, no reconcile runs the stage again,
    /// so a hook never runs twice even if deleting it fails), then its hooks.
    async fn hooks_done(
        &self,
        stage: Stage,
        writer: &ClusterHandle,
        hooks: Vec<Arc<serde_json::Value>>,
    ) -> Result<Action, Error> {
        self.remove_finalizers(&stage.finalizers()).await?;
        delete_hooks::delete_hooks(writer, &hooks).await;
        if !hooks.is_empty() {
            self.event("DeletionHooksCompleted", &format!("{stage:?} hooks completed"))
                .await;
        }
        let later_stages = !deletion::cascade_finalizers(self.app).is_empty()
            || (stage == Stage::PreDelete && Stage::PostDelete.is_held(self.app.finalizers()));
        if later_stages {
            return Ok(Action::requeue(delete_hooks::HOOK_POLL));
        }
        self.state.forget(self.ctx, self.app);
        Ok(Action::await_change())
    }

    /// Removes every finalizer Capstan handles (cascade and deletion hooks) and forgets the
    /// Application.
    async fn release(&self, why: &str) -> Result<Action, Error> {
        let mut names: Vec<&str> = deletion::CASCADE_FINALIZERS.to_vec();
        names.extend(Stage::PreDelete.finalizers());
        names.extend(Stage::PostDelete.finalizers());
        self.remove_finalizers(&names).await?;
        tracing::info!(
            controller = CONTROLLER,
            namespace = self.app.namespace(),
            name = self.app.name_any(),
            "finalizers removed: {why}"
        );
        self.state.forget(self.ctx, self.app);
        Ok(Action::await_change())
    }

    async fn remove_finalizers(&self, names: &[&str]) -> Result<(), Error> {
        deletion::remove_finalizers(&self.api, self.app, names)
            .await
            .map_err(KubeStep::FinalizerPatch.err())
    }

    /// A Normal event about the deletion.
    async fn event(&self, reason: &str, note: &str) {
        self.ctx
            .publish_event(&event_ref(self.app), EventType::Normal, reason, "Delete", note)
            .await;
    }

    /// A failed deletion attempt: after [`deletion::MAX_ATTEMPTS`] the `DeletionError` condition says
    /// so and how to get out; attempts continue with backoff.
    async fn failure(&self, problem: Problem) -> Result<Action, Error> {
        let attempts = self.state.deletion_failed(self.app);
        if attempts >= deletion::MAX_ATTEMPTS {
            let message = format!("cascade deletion failed {attempts} times: {}", problem.message);
            self.report_deletion_error(&message).await?;
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
    async fn report_deletion_error(&self, message: &str) -> Result<String, Error> {
        let (app, name) = (self.app, self.app.name_any());
        let message = format!(
            "{message}. Fix the cause, or leave the resources behind with \
             `kubectl annotate capp {name} capstan.dev/deletion-policy=orphan`, or remove the finalizers with \
             `kubectl patch capp {name} --type=json -p='[{{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}}]'`",
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
        write_status(&self.api, app, app.status.as_ref(), &new)
            .await
            .map_err(KubeStep::StatusWrite.err())?;
        Ok(message)
    }
}

/// The reason of the `DeletionError` condition.
const DELETION_FAILED: &str = "DeletionFailed";
