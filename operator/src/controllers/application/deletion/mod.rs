//! Cascade deletion: what happens to a deleted Application while Capstan's finalizers hold it, as ONE
//! pipeline of named steps (read [`cleanup`] top to bottom):
//!
//! 1. **decide** (pure, [`plan::decide`]): which stage the finalizers still hold the Application for
//!    — PreDelete hooks, the cascade (foreground or background, per Argo CD's finalizers), PostDelete
//!    hooks — or nothing, or `capstan.dev/deletion-policy: orphan` (release everything), or a
//!    self-managing Application (its recorded resources list itself: release everything, as orphan,
//!    with a `DeletionGuarded` event — its resources are the installation that runs it);
//! 2. **connect** (client): the destination (observed with the operator's rights) and the writer
//!    (the Application's ServiceAccount, as the sync wrote; without it nothing is deleted);
//! 3. **PreDelete hooks** (when held): rendered at the synced revision, created, waited for;
//! 4. **load tracked objects** (live cache only, and only once it is complete: a not-yet-listed
//!    object is not "gone"): the objects whose tracking annotation names this Application;
//! 5. **protect** (pure, [`plan::protect`], the guards of `engine::protect` as one step): CRDs, the
//!    operator's namespace, the Application itself, `Delete=false`, Helm's `keep` stay;
//! 6. **delete** (client, [`plan::next_wave`] decides): the highest sync wave left, once nothing of
//!    the previous one is terminating (Argo CD's reverse wave order);
//! 7. **PostDelete hooks** (when held), as in 3;
//! 8. **report**: events (guards that held, hooks, a gone destination or ServiceAccount) and the
//!    `DeletionError` condition of a failure;
//! 9. **release**: the finished stage's finalizers go (then the stage's completed hooks: once the
//!    finalizer is gone no reconcile runs the stage again, so a hook never runs twice).
//!
//! One stage runs per reconcile; the next reconcile starts again at step 1 and the finalizers say how
//! far the cleanup got.
//!
//! Never wedged forever:
//! - the destination's Cluster object is gone → nothing can be deleted; the finalizers are removed
//!   with a `DestinationGone` Warning (Argo CD #5817); likewise a gone ServiceAccount
//!   (`ServiceAccountGone`, naming what is left in place);
//! - annotation `capstan.dev/deletion-policy: orphan` → the finalizers are removed without deleting;
//! - a failed attempt (an unreachable cluster, a rejected delete) is retried with backoff
//!   ([`DELETION_RETRY_FIRST`] doubling up to [`DELETION_RETRY_MAX`]); after [`MAX_ATTEMPTS`], and at
//!   once for a failed hook, the condition `DeletionError` says so and how to get out: fix the cause,
//!   annotate `capstan.dev/deletion-policy: orphan`, or remove the finalizers: `kubectl patch capp NAME
//!   --type=json -p='[{"op":"remove","path":"/metadata/finalizers"}]'`.

mod delete;
pub mod finalizers;
mod hooks;
pub mod plan;

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use serde_json::Value;

use super::findings::{
    AppEvent, DELETION_ERROR_REQUEUE, DELETION_RETRY_FACTOR, DELETION_RETRY_FIRST, DELETION_RETRY_MAX,
};
use super::pipeline::{target_revision, Pipeline};
use super::status::{self, Problem, StatusInput};
use super::{auto_sync, compare, event_ref, identity, State, CONTROLLER};
use crate::api::Application;
use crate::cluster::ops::Propagation;
use crate::cluster::{ClusterError, ClusterHandle, ResolvedDestination};
use crate::controllers::status::{now, write_status};
use crate::controllers::{Context, Error, ErrorKind, KubeStep};
use crate::engine::plan::delete_hooks::Stage as HookStage;
use crate::engine::protect::Protection;
use crate::text::{short_sha, truncate};
use hooks::StageStep;
use plan::{Decision, Stage, Wave};

pub use plan::DELETION_POLICY_ANNOTATION;

/// Failed attempts before `DeletionError` is reported.
pub const MAX_ATTEMPTS: u32 = 5;
/// Requeue while objects are terminating or the live cache is not complete.
pub const DELETE_POLL: Duration = Duration::from_secs(2);

/// One reconcile of a deleted Application (see the module doc).
pub async fn cleanup(app: &Application, ctx: &Context, state: &Arc<State>) -> Result<Action, Error> {
    // The watch cache can lag this controller's own finalizer patch: a reconcile woken by a hook's
    // deletion would see the stage it just released still held and run it again (a PostDelete hook
    // created twice). Deciding on a fresh read closes that window; deletions are rare, one GET is cheap.
    let api: Api<Application> = Api::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
    let fresh = api.get_opt(&app.name_any()).await.map_err(KubeStep::Read.err())?;
    // Gone, or a new object of the same name: its own events drive what comes next.
    let Some(app) = fresh.filter(|f| f.uid() == app.uid() && f.metadata.deletion_timestamp.is_some()) else {
        return Ok(Action::await_change());
    };
    let app = &app;
    let mut run = Cleanup::new(app, ctx, state);
    let outcome = run.stage().await;
    let done = run.report(outcome).await?;
    run.release(done).await
}

/// How one reconcile of the cleanup ends; steps 8 and 9 act on it.
type Outcome = Result<Done, Failure>;

/// A stage that went as far as it could this time.
enum Done {
    /// Look again after this long (hooks running, objects terminating, an incomplete live cache).
    Wait(Duration),
    /// The stage is done: its finalizers go, then its completed hooks (no finalizer at all: the
    /// Application is forgotten).
    Stage {
        finalizers: Vec<String>,
        hooks: Vec<Arc<Value>>,
    },
    /// Every finalizer goes, nothing (more) is deleted; `why` for the log.
    Release(&'static str),
}

/// A stage that failed.
enum Failure {
    /// A deletion hook failed: `DeletionError` at once.
    Hook(String),
    /// An attempt failed: backoff, `DeletionError` after [`MAX_ATTEMPTS`].
    Attempt(Problem),
}

/// Where deletes and hooks go: the destination (read with the operator's rights) and the writer.
struct Target {
    dest: ResolvedDestination,
    writer: Arc<ClusterHandle>,
}

/// What every step of one Application's cleanup works with.
struct Cleanup<'a> {
    app: &'a Application,
    ctx: &'a Context,
    state: &'a Arc<State>,
    api: Api<Application>,
    ns: String,
    name: String,
    /// The writer, once connected (the release step deletes completed hooks through it).
    writer: Option<Arc<ClusterHandle>>,
    /// Events of this reconcile, published by the report step.
    events: Vec<AppEvent>,
}

impl<'a> Cleanup<'a> {
    fn new(app: &'a Application, ctx: &'a Context, state: &'a Arc<State>) -> Self {
        let ns = app.namespace().unwrap_or_default();
        Cleanup {
            app,
            ctx,
            state,
            api: Api::namespaced(ctx.client.clone(), &ns),
            ns,
            name: app.name_any(),
            writer: None,
            events: Vec::new(),
        }
    }

    /// Steps 1–7: the one stage this reconcile runs.
    async fn stage(&mut self) -> Outcome {
        // 1. decide
        let stage = match plan::decide(self.app) {
            Decision::Nothing => {
                let (finalizers, hooks) = (Vec::new(), Vec::new());
                return Ok(Done::Stage { finalizers, hooks });
            }
            Decision::Orphan => {
                return Ok(Done::Release(
                    "deletion-policy orphan: managed resources left in place, no deletion hooks run",
                ))
            }
            Decision::SelfManaged => {
                let note = format!(
                    "guard SelfApplication held: deleting a self-managing Application cascades nothing \
                     (capstan uninstall removes an installation); managed resources are left in place: {}",
                    plan::orphans(self.app)
                );
                self.events.push((EventType::Normal, "DeletionGuarded", note));
                return Ok(Done::Release("self-managing Application: nothing cascades"));
            }
            Decision::Run(stage) => stage,
        };
        // 2. connect
        let target = match self.connect().await {
            Ok(t) => t,
            Err(outcome) => return outcome,
        };
        let outcome = match stage {
            // 3. and 7. PreDelete / PostDelete hooks
            Stage::Hooks(hooks) => self.hooks(hooks, &target).await,
            // 4.–6. load tracked objects, protect, delete the next wave
            Stage::Cascade(propagation) => self.cascade(&target, propagation).await,
        };
        self.writer = Some(target.writer);
        outcome
    }

    /// Step 2: the destination and the writer. A gone destination or ServiceAccount releases the
    /// Application (nothing can be deleted, and waiting would wedge it forever).
    async fn connect(&mut self) -> Result<Target, Outcome> {
        let Some(clusters) = self.ctx.clusters() else {
            let problem = Problem::invalid_spec("InvalidConfig", "no cluster clients configured");
            return Err(Err(Failure::Attempt(problem)));
        };
        let dest = match clusters.resolve(&self.ns, &self.app.spec.destination).await {
            Ok(d) => d,
            Err(ClusterError::NotFound(m)) => {
                let note = format!("destination gone ({m}); managed resources cannot be deleted and are left behind");
                self.events.push((EventType::Warning, "DestinationGone", note));
                return Err(Ok(Done::Release("destination gone")));
            }
            Err(e) => return Err(Err(Failure::Attempt(Problem::from_cluster(&e)))),
        };
        match identity::writer(self.ctx, self.app, &dest.cluster).await {
            Ok(writer) => Ok(Target { dest, writer }),
            Err(p) if p.reason == identity::REASON_SA_NOT_FOUND => {
                let note = format!(
                    "{}; managed resources are left in place: {}",
                    p.message,
                    plan::orphans(self.app)
                );
                self.events.push((EventType::Warning, "ServiceAccountGone", note));
                Err(Ok(Done::Release("service account gone")))
            }
            Err(p) => Err(Err(Failure::Attempt(p))),
        }
    }

    /// Steps 3 and 7: one step of a hook stage — the manifests rendered at the synced revision, the
    /// stage's hooks created or waited for.
    async fn hooks(&mut self, stage: HookStage, target: &Target) -> Outcome {
        let rendered = match self.render_synced().await {
            Ok(objects) => objects,
            Err(p) => {
                let message = format!("{stage:?} hooks: {}", p.message);
                return Err(Failure::Attempt(Problem::of_kind(p.kind, p.reason, message)));
            }
        };
        let dest_ns = self.app.spec.destination.namespace.clone().unwrap_or_default();
        let owner = (self.ns.as_str(), self.name.as_str());
        match hooks::advance(stage, &target.writer, owner, &rendered, &dest_ns).await {
            Ok(StageStep::Waiting) => Ok(Done::Wait(DELETE_POLL)),
            Ok(StageStep::Running(created)) => {
                if !created.is_empty() {
                    let note = format!("running {stage:?} hook(s): {}", created.join(", "));
                    self.events.push((EventType::Normal, "DeletionHooksRunning", note));
                }
                Ok(Done::Wait(hooks::HOOK_POLL))
            }
            Ok(StageStep::Failed(message)) => Err(Failure::Hook(message)),
            Ok(StageStep::Done(done)) => {
                if !done.is_empty() {
                    let note = format!("{stage:?} hooks completed");
                    self.events.push((EventType::Normal, "DeletionHooksCompleted", note));
                }
                let finalizers = plan::stage_finalizers(self.app, Stage::Hooks(stage));
                Ok(Done::Stage {
                    finalizers,
                    hooks: done,
                })
            }
            Err(e) => Err(Failure::Attempt(Problem::from_cluster(&e))),
        }
    }

    /// The manifests at the revision last synced (the target revision if none was), for the hooks.
    async fn render_synced(&self) -> Result<Vec<Value>, Problem> {
        let app = self.app;
        let synced = app
            .status
            .as_ref()
            .and_then(|s| s.sync.as_ref())
            .and_then(|s| s.revision.clone())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| target_revision(&app.spec.source));
        let pipeline = Pipeline::new(app, self.ctx, self.state)
            .map_err(|e| Problem::invalid_spec("InvalidSpec", e.to_string()))?;
        match pipeline.render(&app.spec.source, &synced, false, false).await {
            Ok(r) => Ok(r.objects().to_vec()),
            Err(p) => {
                let message = format!(
                    "the manifests at {} cannot be rendered: {}",
                    short_sha(&synced),
                    p.message
                );
                Err(Problem::of_kind(p.kind, p.reason, message))
            }
        }
    }

    /// Steps 4–6: the tracked objects, the guards, the next wave of deletes.
    async fn cascade(&mut self, target: &Target, propagation: Propagation) -> Outcome {
        // 4. load tracked objects: the Application's instance, from a complete live cache only.
        let view = compare::observe_app(&target.dest.cluster, self.app, &[], "").await;
        if !view.complete {
            return Ok(Done::Wait(DELETE_POLL));
        }
        // 5. protect
        let who = Protection {
            operator_namespace: &self.ctx.settings.namespace,
            app_namespace: &self.ns,
            app_name: &self.name,
        };
        let (deletable, held) = plan::protect(&who, &view.own);
        if !held.is_empty() {
            // One event for all: the recorder folds repeats of a reason into one series.
            let note = truncate(&held.join("; "), status::MAX_STATUS_MESSAGE);
            self.events.push((EventType::Warning, "DeletionGuarded", note));
        }
        // 6. delete the next wave
        match plan::next_wave(&deletable) {
            Wave::Done => {
                let finalizers = plan::stage_finalizers(self.app, Stage::Cascade(propagation));
                Ok(Done::Stage {
                    finalizers,
                    hooks: Vec::new(),
                })
            }
            Wave::Terminating(_) => Ok(Done::Wait(DELETE_POLL)),
            Wave::Delete(wave) => match delete::delete_wave(&target.writer, &wave, propagation).await {
                Ok(()) => Ok(Done::Wait(DELETE_POLL)),
                Err(e) => Err(Failure::Attempt(Problem::from_cluster(&e))),
            },
        }
    }

    /// Step 8: the events of this reconcile; a failure becomes the `DeletionError` condition (a
    /// failed hook at once, other failures after [`MAX_ATTEMPTS`]) and the reconcile's error.
    async fn report(&mut self, outcome: Outcome) -> Result<Done, Error> {
        for (kind, reason, note) in std::mem::take(&mut self.events) {
            self.ctx
                .publish_event(&event_ref(self.app), kind, reason, "Delete", &note)
                .await;
        }
        match outcome {
            Ok(done) => Ok(done),
            Err(Failure::Hook(message)) => {
                let message = self.report_deletion_error(&message).await?;
                Err(Error::Reported {
                    category: DELETION_FAILED,
                    message,
                    retry: ErrorKind::Waiting(DELETION_ERROR_REQUEUE),
                })
            }
            Err(Failure::Attempt(problem)) => {
                let attempts = self.state.deletion_failed(self.app);
                if attempts >= MAX_ATTEMPTS {
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
        }
    }

    /// Writes the `DeletionError` condition with `message` and the ways out (a failed hook may be fixed
    /// by hand, or the Application annotated to be orphaned); returns the condition's message.
    async fn report_deletion_error(&self, message: &str) -> Result<String, Error> {
        let (app, name) = (self.app, &self.name);
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

    /// Step 9: the finalizers the stage frees (then its completed hooks), and the requeue.
    async fn release(&self, done: Done) -> Result<Action, Error> {
        match done {
            Done::Wait(after) => Ok(Action::requeue(after)),
            Done::Stage { finalizers, hooks } => {
                self.remove_finalizers(&finalizers).await?;
                if let Some(writer) = &self.writer {
                    hooks::delete_hooks(writer, &hooks).await;
                }
                if plan::later_stages(self.app, &finalizers) {
                    return Ok(Action::requeue(hooks::HOOK_POLL));
                }
                self.state.forget(self.ctx, self.app);
                Ok(Action::await_change())
            }
            Done::Release(why) => {
                self.remove_finalizers(&plan::handled_finalizers()).await?;
                tracing::info!(
                    controller = CONTROLLER,
                    namespace = self.ns,
                    name = self.name,
                    "finalizers removed: {why}"
                );
                self.state.forget(self.ctx, self.app);
                Ok(Action::await_change())
            }
        }
    }

    async fn remove_finalizers<S: AsRef<str>>(&self, names: &[S]) -> Result<(), Error> {
        finalizers::remove_finalizers(&self.api, self.app, names)
            .await
            .map_err(KubeStep::FinalizerPatch.err())
    }
}

/// The reason of the `DeletionError` condition.
const DELETION_FAILED: &str = "DeletionFailed";
