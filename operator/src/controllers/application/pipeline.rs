//! The reconcile itself: finalizer dispatch, then the named pipeline steps (see the parent module).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::api::Patch;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::{json, Value};

use super::compare::{self, LiveView};
use super::delete_hooks::{self, StageStep};
use super::deletion::{self, Progress};
use super::executor::Owner;
use super::policy::{self, AutoDecision, AutoInput};
use super::status::{self, Compared, Problem, StatusInput};
use super::sync::{self, StepArgs};
use super::{dependencies, event_ref, kube_err, peers, periodic, requeue, source, State, CONTROLLER};
use crate::api::application::{
    ApplicationSource, ApplicationStatus, Operation, OperationPhase, OperationState, ResultCode, SyncStatusCode,
};
use crate::api::conditions::{REASON_DEPENDENCY_CYCLE, REASON_DEPENDENCY_NOT_READY, REASON_POLICY_DENIED};
use crate::api::labels::REFRESH_ANNOTATIONS;
use crate::api::{Application, PolicySet};
use crate::cluster::{app_instance_id, ClusterError, ResolvedDestination};
use crate::controllers::status::{now, patch_params, write_status};
use crate::controllers::{lock, policy_access};
use crate::controllers::{Context, Error};
use crate::engine::diff::DiffOptions;
use crate::engine::object;
use crate::engine::plan::delete_hooks::Stage;
use crate::engine::plan::{termination, LiveObject, Step};
use crate::text::short_sha;

/// Requeue after a comparison error (source or destination trouble).
const ERROR_REQUEUE: Duration = Duration::from_secs(30);
/// Requeue while policies block a sync (a PolicySet change also wakes the Application).
const POLICY_REQUEUE: Duration = Duration::from_secs(30);

/// Requeue while the live cache is incomplete or dependencies are not ready.
const WAIT_REQUEUE: Duration = Duration::from_secs(5);

/// Reconciles one Application (see the parent module).
pub async fn reconcile(app: Arc<Application>, ctx: Arc<Context>, state: Arc<State>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = if app.metadata.deletion_timestamp.is_some() {
        cleanup(&app, &ctx, &state).await
    } else {
        Pipeline::new(&app, &ctx, &state)?.run().await
    };
    ctx.metrics
        .app_reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    result
}

/// Everything the status step needs, gathered by the earlier steps.
#[derive(Default)]
struct Findings {
    compared: Option<Compared>,
    comparison_error: Option<Problem>,
    operation_state: Option<OperationState>,
    record_history: bool,
    sync_error: Option<Problem>,
    dependency: Option<Problem>,
    invalid_spec: Option<Problem>,
    requeue: Option<Duration>,
    clear_operation: bool,
    events: Vec<(EventType, &'static str, String)>,
    /// What the PolicySets that apply said about the rendered state (`None`: none applies, or the
    /// render failed).
    policy: Option<policy_access::Findings>,
    /// The PolicySet cache has not listed yet: no sync may start (fail closed at start-up).
    policy_pending: bool,
}

impl Findings {
    /// Why no sync may start because of policies, if so.
    fn policy_block(&self) -> Option<Problem> {
        if self.policy_pending {
            return Some(Problem::new("PolicyPending", "waiting for the PolicySets to be listed"));
        }
        self.policy_denied()
    }

    fn policy_denied(&self) -> Option<Problem> {
        let denied = &self.policy.as_ref()?.denied;
        (!denied.is_empty()).then(|| {
            Problem::new(
                REASON_POLICY_DENIED,
                format!("sync denied by policy: {}", denied.join("; ")),
            )
        })
    }

    fn policy_warning(&self) -> Option<Problem> {
        let warned = &self.policy.as_ref()?.warned;
        (!warned.is_empty()).then(|| Problem::new("PolicyWarning", warned.join("; ")))
    }
}

struct Pipeline<'a> {
    app: &'a Application,
    ctx: &'a Context,
    state: &'a Arc<State>,
    api: Api<Application>,
    ns: String,
    name: String,
    /// The status as last written by this reconcile (the write-ahead patch updates it).
    written: Option<ApplicationStatus>,
    found: Findings,
    /// Where this reconcile's time went, logged at debug level (`phase`, elapsed since the start).
    timings: Timings,
}

/// Phase marks of one reconcile, for the debug log: where the time of a slow sync goes.
struct Timings {
    started: std::time::Instant,
    marks: Vec<(&'static str, Duration)>,
}

impl Timings {
    fn new() -> Self {
        Timings {
            started: std::time::Instant::now(),
            marks: Vec::new(),
        }
    }

    fn mark(&mut self, phase: &'static str) {
        self.marks.push((phase, self.started.elapsed()));
    }

    fn summary(&self) -> String {
        self.marks
            .iter()
            .map(|(phase, at)| format!("{phase}@{}ms", at.as_millis()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The rendered target: commit and objects (namespaces filled in later).
struct Rendered {
    commit: String,
    objects: Vec<Value>,
    source_type: crate::api::application::ApplicationSourceType,
}

impl<'a> Pipeline<'a> {
    fn new(app: &'a Application, ctx: &'a Context, state: &'a Arc<State>) -> Result<Self, Error> {
        let ns = app
            .namespace()
            .ok_or_else(|| Error::InvalidSpec("an Application must be namespaced".into()))?;
        Ok(Pipeline {
            app,
            ctx,
            state,
            api: Api::namespaced(ctx.client.clone(), &ns),
            name: app.name_any(),
            ns,
            written: app.status.clone(),
            found: Findings::default(),
            timings: Timings::new(),
        })
    }

    async fn run(mut self) -> Result<Action, Error> {
        source::track(self.ctx, self.app);
        let instance = app_instance_id(&self.ns, &self.name);
        self.state.register_instance(&instance, self.app);
        if self.app.spec.suspend {
            // Frozen: no comparison, no sync, status untouched (see the module doc).
            return Ok(requeue(None, periodic(self.ctx.settings.reconcile_interval, self.app)));
        }
        let refresh = policy::refresh_requested(self.app.metadata.annotations.as_ref());
        let generation_changed =
            self.app.status.as_ref().and_then(|s| s.observed_generation) != self.app.metadata.generation;
        let force = refresh.is_some() | self.state.take_forced(self.app) | generation_changed;
        let hard = refresh == Some(true);

        // 1. destination
        let dest = match self.destination().await {
            Ok(d) => Some(d),
            Err(p) => {
                self.found.requeue = Some(ERROR_REQUEUE);
                if p.reason == "NamespaceNotAllowed" || p.reason == "InvalidConfig" {
                    self.found.invalid_spec = Some(p);
                } else {
                    self.found.comparison_error = Some(p);
                }
                None
            }
        };
        let Some(dest) = dest else {
            return self.finish(refresh.is_some()).await;
        };
        self.state.subscribe_live(&dest.cluster);

        // 2–3. resolve source, render
        let target_rev = target_revision(&self.app.spec.source);
        let rendered = self.render(&self.app.spec.source, &target_rev, force, hard).await;
        self.timings.mark("render");
        let rendered = match rendered {
            Ok(r) => Some(r),
            Err(p) => {
                self.found.comparison_error = Some(p);
                self.found.requeue = Some(ERROR_REQUEUE);
                None
            }
        };

        if let Some(r) = &rendered {
            // Deletion hooks need the Application held by a finalizer before anyone deletes it.
            if let Err(e) = delete_hooks::ensure_finalizers(&self.api, self.app, &r.objects).await {
                tracing::warn!(error = %e, "adding the deletion-hook finalizers failed; retried next reconcile");
            }
        }

        // 4. live
        let dest_ns = self.app.spec.destination.namespace.clone().unwrap_or_default();
        let desired_raw: &[Value] = rendered.as_ref().map(|r| r.objects.as_slice()).unwrap_or_default();
        let previous = self
            .app
            .status
            .as_ref()
            .map(|s| s.resources.as_slice())
            .unwrap_or_default();
        let kinds = compare::kinds_to_watch(desired_raw, previous);
        let view = compare::observe(&dest.cluster, &instance, &kinds, desired_raw, &dest_ns).await;
        self.timings.mark("live");
        let desired: Vec<Value> = desired_raw
            .iter()
            .map(|o| compare::with_namespace(o, &view, &dest_ns))
            .collect();
        if !view.complete {
            self.found.requeue = Some(WAIT_REQUEUE);
        }

        // 5. compare
        let mut planner_live = Vec::new();
        if let Some(r) = &rendered {
            let opts = DiffOptions::with_ignore_differences(&self.app.spec.ignore_differences);
            let comparison = compare::compare(&self.ns, &self.name, &r.commit, &desired, &view, &opts);
            let mut compared = comparison.compared;
            compared.source_type = Some(r.source_type);
            planner_live = comparison.live;
            if let Some(p) = namespace_violation(&dest, &dest_ns, &desired) {
                self.found.invalid_spec = Some(p);
            }
            self.found.compared = Some(compared);
        }
        self.timings.mark("compare");
        if let Some(r) = &rendered {
            self.evaluate_policies(r, &desired).await;
        }

        // 6. policy → operation; 7. sync step
        if let Some(op) = self.choose_operation(rendered.as_ref()).await? {
            let target = (rendered.as_ref(), desired.as_slice(), planner_live.as_slice());
            self.sync_step(&dest, &view, op, target, &dest_ns, force, hard).await?;
            self.timings.mark("sync");
        }
        self.finish(refresh.is_some()).await
    }

    /// Step 1: the destination, with the Cluster's namespace allow-list checked for the destination
    /// namespace.
    async fn destination(&self) -> Result<ResolvedDestination, Problem> {
        let clusters = self
            .ctx
            .clusters()
            .ok_or_else(|| Problem::new("InvalidConfig", "no cluster clients configured"))?;
        let dest = clusters
            .resolve(&self.ns, &self.app.spec.destination)
            .await
            .map_err(|e| Problem::new(e.category(), e.to_string()))?;
        if let Some(ns) = self.app.spec.destination.namespace.as_deref().filter(|n| !n.is_empty()) {
            dest.check_namespace(ns)
                .map_err(|e| Problem::new(e.category(), e.to_string()))?;
        }
        Ok(dest)
    }

    /// Steps 2–3 for `source` at `revision`.
    async fn render(
        &self,
        source: &ApplicationSource,
        revision: &str,
        force: bool,
        hard: bool,
    ) -> Result<Rendered, Problem> {
        let resolved = source::resolve(self.ctx, self.state, self.app, source, revision, force).await?;
        let output = source::render(self.ctx, self.app, source, &resolved, hard).await?;
        Ok(Rendered {
            commit: resolved.commit,
            objects: output.objects.clone(),
            source_type: source::source_type(output.tool),
        })
    }

    /// Step 5b: the PolicySets that apply, evaluated against the Application and each rendered object
    /// (off the async runtime: Rego is CPU-bound). Blocks syncs until the PolicySet cache has listed.
    async fn evaluate_policies(&mut self, rendered: &Rendered, desired: &[Value]) {
        if !self.state.policies_synced() {
            self.found.policy_pending = true;
            return;
        }
        let sets = self.state.policy_sets();
        let prepared = policy_access::prepare(
            &self.ctx.client,
            &self.ctx.policies,
            &sets,
            self.app,
            self.ctx.namespace(),
        )
        .await;
        if prepared.is_empty() {
            return;
        }
        let application = policy_access::application_input(self.app);
        let cluster = json!({
            "server": self.app.spec.destination.server,
            "name": self.app.spec.destination.name,
            "namespace": self.app.spec.destination.namespace,
        });
        let repository = json!({"url": self.app.spec.source.repo_url, "revision": rendered.commit});
        let desired = desired.to_vec();
        let findings = tokio::task::spawn_blocking(move || {
            policy_access::evaluate(&prepared, &application, &cluster, &repository, &desired)
        })
        .await
        .unwrap_or_else(|e| policy_access::Findings {
            denied: vec![format!("policy evaluation failed: {e}")],
            ..Default::default()
        });
        if self.state.dry_run_changed(self.app, &findings.dry_run) {
            self.report_dry_run(&sets, &findings.dry_run).await;
        }
        self.timings.mark("policy");
        self.found.policy = Some(findings);
    }

    /// `DryRun` PolicySets only report: one Event on each PolicySet with what it found about this
    /// Application (`kubectl describe cpolicy NAME`), when the findings change.
    async fn report_dry_run(&self, sets: &[Arc<PolicySet>], findings: &[(String, Vec<String>)]) {
        for (key, messages) in findings {
            let Some(set) = sets
                .iter()
                .find(|s| format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any()) == *key)
            else {
                continue;
            };
            let note = format!("Application {}/{}: {}", self.ns, self.name, messages.join("; "));
            tracing::info!(policyset = %key, namespace = %self.ns, name = %self.name, "policy dry run: {note}");
            self.ctx
                .publish_event(
                    &set.object_ref(&()),
                    EventType::Normal,
                    "PolicyDryRun",
                    "Evaluate",
                    &note,
                )
                .await;
        }
    }

    /// Step 6: the operation to advance this reconcile, if any.
    async fn choose_operation(
        &mut self,
        rendered: Option<&Rendered>,
    ) -> Result<Option<(Operation, Option<OperationState>)>, Error> {
        let current = self.app.status.as_ref().and_then(|s| s.operation_state.clone());
        if let Some(op) = current.as_ref().filter(|o| !sync::is_completed(o)) {
            let mut op = op.clone();
            if let Some(timeout) = self.ctx.settings.sync_timeout {
                if termination::exceeded_timeout(&op, timeout, Timestamp::now()) {
                    termination::terminate_for_timeout(&mut op, timeout);
                }
            }
            return Ok(Some((op.operation.clone(), Some(op))));
        }
        if let Some(problem) = self.found.policy_block() {
            if problem.reason != REASON_POLICY_DENIED {
                // Not listed yet: shown like any other thing the sync waits for.
                self.found.dependency.get_or_insert(problem);
                self.found.requeue = Some(WAIT_REQUEUE);
                return Ok(None);
            }
            // A running operation goes on (it was allowed when it started); nothing new starts.
            if self.app.operation.is_some() {
                let note = format!("requested sync refused: {}", problem.message);
                self.found.events.push((EventType::Warning, "SyncDenied", note));
                self.found.sync_error = Some(problem);
                self.found.clear_operation = true;
            }
            self.found.requeue.get_or_insert(POLICY_REQUEUE);
            return Ok(None);
        }
        if let Some(requested) = self.app.operation.clone() {
            return Ok(self.requested_operation(requested, current));
        }
        if let Some(last) = current.as_ref().filter(|o| retryable(o)) {
            let verdict = retry_verdict(last);
            let latest = rendered.map(|r| r.commit.as_str()).unwrap_or_default();
            if !matches!(verdict, RetryVerdict::Exhausted) {
                if let Some(next) = sync::refresh_retry(last, latest, Timestamp::now()) {
                    return Ok(Some((next.operation.clone(), Some(next))));
                }
            }
            match verdict {
                RetryVerdict::Due => {
                    return Ok(Some((
                        last.operation.clone(),
                        Some(sync::restart(last, Timestamp::now())),
                    )))
                }
                RetryVerdict::Wait(d) => {
                    self.found.requeue = Some(d);
                    return Ok(None);
                }
                RetryVerdict::Exhausted => {}
            }
        }
        if self.found.comparison_error.is_some() || self.found.invalid_spec.is_some() {
            return Ok(None);
        }
        let (Some(compared), Some(r)) = (self.found.compared.as_ref(), rendered) else {
            return Ok(None);
        };
        let since_last = current
            .as_ref()
            .and_then(|o| o.finished_at.as_ref())
            .map(|t| Duration::from_millis((Timestamp::now().as_millisecond() - t.0.as_millisecond()).max(0) as u64));
        let input = AutoInput {
            policy: self.app.spec.sync_policy.as_ref(),
            sync: compared.sync,
            revision: &r.commit,
            resources: &compared.resources,
            last: current.as_ref(),
            self_heal_attempts: self.state.self_heal_attempts(self.app, &r.commit),
            since_last,
        };
        match policy::decide(&input) {
            AutoDecision::Idle => Ok(None),
            AutoDecision::Backoff(d) => {
                self.found.requeue = Some(d);
                Ok(None)
            }
            AutoDecision::AlreadyFailed(m) | AutoDecision::Refused(m) => {
                self.found.sync_error = Some(Problem::new("SyncFailed", m));
                Ok(None)
            }
            AutoDecision::Sync(op) => {
                if !self.dependencies_ready() {
                    return Ok(None);
                }
                let self_heal = current.is_some() && op.sync.as_ref().is_some_and(|s| !s.resources.is_empty());
                self.state.count_self_heal(self.app, &r.commit, self_heal);
                Ok(Some((*op, None)))
            }
        }
    }

    /// A manual `operation`: finished already (remove it), refused (rollback with automated sync), or
    /// to start.
    fn requested_operation(
        &mut self,
        requested: Operation,
        current: Option<OperationState>,
    ) -> Option<(Operation, Option<OperationState>)> {
        let history = self
            .app
            .status
            .as_ref()
            .map(|s| s.history.as_slice())
            .unwrap_or_default();
        let op = match requested.rollback.as_ref() {
            Some(rb) => {
                match policy::rollback_to_sync(&requested, rb.id, history, self.app.spec.sync_policy.as_ref()) {
                    Ok(op) => op,
                    Err(message) => {
                        self.found.sync_error = Some(Problem::new("RollbackRefused", message));
                        self.found.clear_operation = true;
                        return None;
                    }
                }
            }
            None => requested,
        };
        if let Some(done) = current.filter(|c| c.operation == op) {
            if retryable(&done) {
                match retry_verdict(&done) {
                    RetryVerdict::Due => return Some((op, Some(sync::restart(&done, Timestamp::now())))),
                    RetryVerdict::Wait(d) => {
                        self.found.requeue = Some(d);
                        return None;
                    }
                    RetryVerdict::Exhausted => {}
                }
            }
            self.found.clear_operation = true;
            return None;
        }
        if !self.dependencies_ready() {
            return None;
        }
        Some((op, None))
    }

    /// `spec.dependsOn`: ready, or the waiting/cycle problem recorded.
    fn dependencies_ready(&mut self) -> bool {
        if self.app.spec.depends_on.is_empty() {
            return true;
        }
        let peers = peers(&self.state.applications(), &self.ns);
        let mut peers = peers;
        peers.entry(self.name.clone()).or_insert_with(|| dependencies::Peer {
            depends_on: self.app.spec.depends_on.clone(),
            ..Default::default()
        });
        match dependencies::check(&self.name, &peers) {
            dependencies::Verdict::Ready => true,
            dependencies::Verdict::Waiting(m) => {
                self.found.dependency = Some(Problem::new(REASON_DEPENDENCY_NOT_READY, m));
                self.found.requeue = Some(Duration::from_secs(10));
                false
            }
            dependencies::Verdict::Cycle(m) => {
                self.found.dependency = Some(Problem::new(REASON_DEPENDENCY_CYCLE, m));
                false
            }
        }
    }

    /// Step 7: one sync step of `op`.
    #[allow(clippy::too_many_arguments)]
    async fn sync_step(
        &mut self,
        dest: &ResolvedDestination,
        view: &LiveView,
        (op, state): (Operation, Option<OperationState>),
        (target, desired, live): (Option<&Rendered>, &[Value], &[LiveObject]),
        dest_ns: &str,
        force: bool,
        hard: bool,
    ) -> Result<(), Error> {
        if self.found.invalid_spec.is_some() && state.is_none() {
            return Ok(());
        }
        let sync_op = op.sync.clone().unwrap_or_default();
        let source = sync_op.source.clone().unwrap_or_else(|| self.app.spec.source.clone());
        let wanted = state
            .as_ref()
            .and_then(|s| s.sync_result.as_ref())
            .map(|r| r.revision.clone())
            .filter(|r| !r.is_empty())
            .or(sync_op.revision.clone())
            .unwrap_or_else(|| target_revision(&source));
        let same_as_target = source == self.app.spec.source
            && target.is_some_and(|t| t.commit == wanted || target_revision(&source) == wanted);
        let own_render;
        let (revision, objects, rendered_ok): (String, Vec<Value>, bool) = match target {
            Some(t) if same_as_target => (t.commit.clone(), desired.to_vec(), true),
            _ => match self.render(&source, &wanted, force, hard).await {
                Ok(r) => {
                    own_render = r
                        .objects
                        .iter()
                        .map(|o| compare::with_namespace(o, view, dest_ns))
                        .collect::<Vec<_>>();
                    (r.commit, own_render, true)
                }
                Err(p) => {
                    self.found.comparison_error.get_or_insert(p);
                    (wanted.clone(), Vec::new(), false)
                }
            },
        };
        let namespace_live = self.namespace_live(dest, &op, dest_ns).await;
        let is_new = state.is_none() || state.as_ref().is_some_and(|s| s.sync_result.is_none());
        let owner = Owner {
            namespace: &self.ns,
            name: &self.name,
        };
        let args = StepArgs {
            owner,
            destination_namespace: dest_ns,
            revision: &revision,
            desired: &objects,
            live,
            view,
            namespace_live: namespace_live.as_ref(),
            operation: &op,
            policy: self.app.spec.sync_policy.as_ref(),
            state: state.as_ref(),
            wave_delay: self.ctx.settings.wave_delay,
            rendered: rendered_ok,
            prune_confirmed: prune_confirmed(self.app),
        };
        let (api, app) = (self.api.clone(), self.app);
        let base = self.written.clone();
        let written = std::sync::Mutex::new(None);
        let result = sync::run(&dest.cluster, &args, |op_state| {
            let mut next = base.clone().unwrap_or_default();
            next.operation_state = Some(op_state);
            let written = &written;
            async move {
                write_status(&api, app, base.as_ref(), &next).await.map_err(kube_err)?;
                *lock(written) = Some(next);
                Ok(())
            }
        })
        .await?;
        if let Some(w) = lock(&written).take() {
            self.written = Some(w);
        }
        if is_new {
            let by = if op.initiated_by.as_ref().is_some_and(|i| i.automated) {
                "automated sync"
            } else {
                "user"
            };
            self.found.events.push((
                EventType::Normal,
                "SyncStarted",
                format!("{by} started a sync to {}", short_sha(&revision)),
            ));
        }
        self.after_step(&result, state.as_ref(), &revision);
        let succeeded_now =
            result.state.phase == OperationPhase::Succeeded && state.as_ref().is_none_or(|s| !sync::is_completed(s));
        if succeeded_now && same_as_target && !result.applied.is_empty() {
            self.compare_after_sync(view, &objects, &revision, &result.applied);
        }
        Ok(())
    }

    /// A sync that just succeeded is compared again against what its applies returned, so the status
    /// written by this reconcile already says Synced (instead of the next reconcile, once the watch has
    /// caught up; that one then finds nothing to write).
    fn compare_after_sync(&mut self, view: &LiveView, desired: &[Value], revision: &str, applied: &[Value]) {
        let after = view.with_applied(applied);
        let opts = DiffOptions::with_ignore_differences(&self.app.spec.ignore_differences);
        let mut compared = compare::compare(&self.ns, &self.name, revision, desired, &after, &opts).compared;
        compared.source_type = self.found.compared.as_ref().and_then(|c| c.source_type);
        self.found.compared = Some(compared);
        self.timings.mark("compare-after-sync");
    }

    /// Requeue, history, events and metrics after a step.
    fn after_step(&mut self, result: &sync::StepResult, before: Option<&OperationState>, revision: &str) {
        let op = &result.state;
        let pruned_before = before.map(count_pruned).unwrap_or(0);
        let pruned_now = count_pruned(op);
        if pruned_now > pruned_before {
            self.found.events.push((
                EventType::Normal,
                "ResourcesPruned",
                format!("pruned {} resource(s)", pruned_now - pruned_before),
            ));
        }
        let finished_now = sync::is_completed(op) && before.is_none_or(|b| !sync::is_completed(b));
        let step_requeue = result.step.requeue_after(self.ctx.settings.wave_delay);
        self.found.requeue = match (self.found.requeue, step_requeue) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if finished_now {
            let message = op.message.clone().unwrap_or_default();
            let label = format!("{:?}", op.phase);
            self.ctx
                .metrics
                .app_sync_total
                .with_label_values(&[&self.ns, &self.name, &label])
                .inc();
            let (kind, reason) = match op.phase {
                OperationPhase::Succeeded => (EventType::Normal, "SyncSucceeded"),
                _ => (EventType::Warning, "SyncFailed"),
            };
            self.found
                .events
                .push((kind, reason, format!("sync to {}: {message}", short_sha(revision))));
            self.found.record_history = matches!(
                result.step,
                Step::Done {
                    record_history: true,
                    ..
                }
            ) || (op.phase == OperationPhase::Succeeded
                && op
                    .operation
                    .sync
                    .as_ref()
                    .is_some_and(|s| s.resources.is_empty() && !s.dry_run));
            let retry_pending = retryable(op) && !matches!(retry_verdict(op), RetryVerdict::Exhausted);
            if self.app.operation.is_some() && !retry_pending {
                self.found.clear_operation = true;
            }
            if retryable(op) {
                if let RetryVerdict::Wait(d) = retry_verdict(op) {
                    self.found.requeue = Some(d);
                }
            }
            // Re-compare right away: the sync changed the live state.
            self.found.requeue = Some(
                self.found
                    .requeue
                    .map_or(Duration::from_secs(1), |r| r.min(Duration::from_secs(1))),
            );
        }
        self.found.operation_state = Some(op.clone());
    }

    /// The live destination namespace, when `CreateNamespace=true` asks for it.
    async fn namespace_live(&self, dest: &ResolvedDestination, op: &Operation, dest_ns: &str) -> Option<LiveObject> {
        let mut options: Vec<&str> = self
            .app
            .spec
            .sync_policy
            .as_ref()
            .map(|p| p.sync_options.iter().map(String::as_str).collect())
            .unwrap_or_default();
        if let Some(s) = &op.sync {
            options.extend(s.sync_options.iter().map(String::as_str));
        }
        let wanted = options.iter().rev().find_map(|o| {
            let (k, v) = o.split_once('=')?;
            (k.trim() == "CreateNamespace").then(|| v.trim().eq_ignore_ascii_case("true"))
        });
        if wanted != Some(true) || dest_ns.is_empty() {
            return None;
        }
        let gvk = kube::core::GroupVersionKind::gvk("", "v1", "Namespace");
        match crate::cluster::ops::get(&dest.cluster, &gvk, "", dest_ns).await {
            Ok(found) => found.map(|o| LiveObject {
                health: crate::engine::health::assess(&o),
                in_sync: false,
                object: o.into(),
            }),
            Err(_) => None,
        }
    }

    /// Step 8: status, metadata clean-up, events, metrics; the requeue.
    async fn finish(mut self, refreshed: bool) -> Result<Action, Error> {
        let found = std::mem::take(&mut self.found);
        let input = StatusInput {
            old: self.app.status.as_ref(),
            generation: self.app.metadata.generation,
            spec: &self.app.spec,
            compared: found.compared.as_ref(),
            comparison_error: found.comparison_error.clone(),
            operation_state: found.operation_state.as_ref(),
            record_history: found.record_history,
            sync_error: found.sync_error.clone(),
            dependency: found.dependency.clone(),
            deletion_error: None,
            invalid_spec: found.invalid_spec.clone(),
            policy_denied: found.policy_denied(),
            policy_warning: found.policy_warning(),
            now: now(),
        };
        let new = status::compute(&input);
        write_status(&self.api, self.app, self.written.as_ref(), &new)
            .await
            .map_err(kube_err)?;
        self.clean_metadata(refreshed, found.clear_operation).await?;
        let mut events = found.events;
        if drifted(self.app.status.as_ref(), &new) {
            events.push((
                EventType::Normal,
                "DriftDetected",
                "the live state drifted from Git (OutOfSync at the same revision)".into(),
            ));
        }
        if let Some(p) = found
            .sync_error
            .as_ref()
            .filter(|p| !has_condition_message(self.app.status.as_ref(), &p.message))
        {
            events.push((EventType::Warning, "SyncError", p.message.clone()));
        }
        for (kind, reason, note) in events {
            self.ctx
                .publish_event(&event_ref(self.app), kind, reason, "Sync", &note)
                .await;
        }
        self.record_info(&new);
        self.timings.mark("status");
        tracing::debug!(
            namespace = %self.ns,
            name = %self.name,
            requeue_ms = found.requeue.map(|d| d.as_millis() as u64),
            "reconcile phases: {}",
            self.timings.summary()
        );
        Ok(requeue(
            found.requeue,
            periodic(self.ctx.settings.reconcile_interval, self.app),
        ))
    }

    /// Removes the handled refresh annotations and the finished `operation` in one patch.
    async fn clean_metadata(&self, refreshed: bool, clear_operation: bool) -> Result<(), Error> {
        if !refreshed && !clear_operation {
            return Ok(());
        }
        let mut patch = json!({});
        if refreshed {
            let annotations: serde_json::Map<String, Value> = REFRESH_ANNOTATIONS
                .iter()
                .filter(|k| self.app.annotations().contains_key(**k))
                .map(|k| (k.to_string(), Value::Null))
                .collect();
            patch["metadata"] = json!({ "annotations": annotations });
        }
        if clear_operation {
            patch["operation"] = Value::Null;
        }
        match self.api.patch(&self.name, &patch_params(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(kube_err(e)),
        }
    }

    fn record_info(&self, status: &ApplicationStatus) {
        let spec = &self.app.spec;
        let labels = vec![
            self.ns.clone(),
            self.name.clone(),
            spec.project.clone(),
            crate::metrics::repo_label(&spec.source.repo_url),
            spec.destination
                .server
                .clone()
                .or_else(|| spec.destination.name.clone())
                .unwrap_or_default(),
            spec.destination.namespace.clone().unwrap_or_default(),
            format!("{:?}", status.sync.as_ref().map(|s| s.status).unwrap_or_default()),
            format!("{:?}", status.health.as_ref().map(|h| h.status).unwrap_or_default()),
            policy::automated(spec.sync_policy.as_ref()).is_some().to_string(),
        ];
        self.state.record_info(self.ctx, self.app, labels);
    }
}

/// Cleanup of a deleted Application, one stage per reconcile while its finalizers hold it: the
/// PreDelete hooks, the cascade deletion of the managed resources (see [`deletion`]), the PostDelete
/// hooks (see [`delete_hooks`]). Each stage removes its own finalizer when done.
async fn cleanup(app: &Application, ctx: &Context, state: &Arc<State>) -> Result<Action, Error> {
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
        Err(e) => return deletion_failure(app, ctx, state, &api, &e.to_string()).await,
    };
    if pre {
        return hook_stage(Stage::PreDelete, app, ctx, state, &api, &dest).await;
    }
    if !cascade.is_empty() {
        let instance = app_instance_id(&ns, &app.name_any());
        let previous = app.status.as_ref().map(|s| s.resources.as_slice()).unwrap_or_default();
        let kinds = compare::kinds_to_watch(&[], previous);
        let view = compare::observe(&dest.cluster, &instance, &kinds, &[], "").await;
        if !view.complete {
            return Ok(Action::requeue(deletion::DELETE_POLL));
        }
        let propagation = deletion::propagation(&cascade);
        return match deletion::delete_tracked(&dest.cluster, &ns, &app.name_any(), &view.own, propagation).await {
            Ok(Progress::Done) if post => {
                let names: Vec<&str> = cascade.iter().map(String::as_str).collect();
                deletion::remove_finalizers(&api, app, &names).await.map_err(kube_err)?;
                Ok(Action::requeue(delete_hooks::HOOK_POLL))
            }
            Ok(Progress::Done) => release(app, ctx, state, &api, "managed resources deleted").await,
            Ok(Progress::Deleting(_) | Progress::Waiting) => Ok(Action::requeue(deletion::DELETE_POLL)),
            Err(e) => deletion_failure(app, ctx, state, &api, &e.to_string()).await,
        };
    }
    hook_stage(Stage::PostDelete, app, ctx, state, &api, &dest).await
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
            return deletion_failure(app, ctx, state, api, &message).await;
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
        Ok(StageStep::Failed(message)) => report_deletion_error(app, api, &message).await,
        Ok(StageStep::Done(hooks)) => {
            // The finalizer goes first: once it is gone no reconcile runs this stage again, so a hook
            // never runs twice even if deleting it fails.
            deletion::remove_finalizers(api, app, &stage.finalizers())
                .await
                .map_err(kube_err)?;
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
        Err(e) => deletion_failure(app, ctx, state, api, &e.to_string()).await,
    }
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
    deletion::remove_finalizers(api, app, &names).await.map_err(kube_err)?;
    tracing::info!(
        controller = CONTROLLER,
        namespace = app.namespace(),
        name = app.name_any(),
        "finalizers removed: {why}"
    );
    state.forget(ctx, app);
    Ok(Action::await_change())
}

/// A failed deletion attempt: after [`deletion::MAX_ATTEMPTS`] the `DeletionError` condition says so
/// and how to get out; attempts continue with backoff.
async fn deletion_failure(
    app: &Application,
    ctx: &Context,
    state: &Arc<State>,
    api: &Api<Application>,
    message: &str,
) -> Result<Action, Error> {
    let attempts = state.deletion_failed(app);
    if attempts >= deletion::MAX_ATTEMPTS {
        let message = format!("cascade deletion failed {attempts} times: {message}");
        report_deletion_error(app, api, &message).await?;
    }
    let delay = policy::backoff(Duration::from_secs(2), 2, Duration::from_secs(60), attempts);
    let _ = ctx;
    Ok(Action::requeue(delay))
}

/// Writes the `DeletionError` condition with `message` and the ways out; looks again later (a failed
/// hook may be fixed by hand, or the Application annotated to be orphaned).
async fn report_deletion_error(app: &Application, api: &Api<Application>, message: &str) -> Result<Action, Error> {
    let message = format!(
        "{message}. Fix the cause, or leave the resources behind with \
         `kubectl annotate capp {} capstan.dev/deletion-policy=orphan`, or remove the finalizers with \
         `kubectl patch capp {} --type=json -p='[{{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}}]'`",
        app.name_any(),
        app.name_any()
    );
    let spec = app.spec.clone();
    let input = StatusInput {
        old: app.status.as_ref(),
        generation: app.metadata.generation,
        spec: &spec,
        compared: None,
        comparison_error: None,
        operation_state: None,
        record_history: false,
        sync_error: None,
        dependency: None,
        deletion_error: Some(Problem::new("DeletionFailed", message)),
        invalid_spec: None,
        policy_denied: None,
        policy_warning: None,
        now: now(),
    };
    let new = status::compute(&input);
    write_status(api, app, app.status.as_ref(), &new)
        .await
        .map_err(kube_err)?;
    Ok(Action::requeue(deletion::DELETE_POLL.max(delete_hooks::HOOK_POLL) * 5))
}

/// The target revision, `HEAD` when unset.
fn target_revision(source: &ApplicationSource) -> String {
    source
        .target_revision
        .clone()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "HEAD".into())
}

/// A desired object's namespace outside the Cluster's allow-list (sync refused).
fn namespace_violation(dest: &ResolvedDestination, dest_ns: &str, desired: &[Value]) -> Option<Problem> {
    if dest.allowed_namespaces.is_empty() {
        return None;
    }
    let _ = dest_ns;
    desired
        .iter()
        .filter(|o| !object::is_skipped(o))
        .find_map(|o| dest.check_namespace(object::namespace(o)).err())
        .map(|e| Problem::new(e.category(), e.to_string()))
}

fn prune_confirmed(app: &Application) -> bool {
    ["capstan.dev/deletion-approved", "argocd.argoproj.io/deletion-approved"]
        .iter()
        .any(|k| app.annotations().contains_key(*k))
}

fn count_pruned(op: &OperationState) -> usize {
    op.sync_result
        .as_ref()
        .map(|r| {
            r.resources
                .iter()
                .filter(|x| x.status == Some(ResultCode::Pruned))
                .count()
        })
        .unwrap_or(0)
}

/// OutOfSync after Synced at the same revision: someone changed the live state.
fn drifted(old: Option<&ApplicationStatus>, new: &ApplicationStatus) -> bool {
    let (Some(o), Some(n)) = (old.and_then(|s| s.sync.as_ref()), new.sync.as_ref()) else {
        return false;
    };
    o.status == SyncStatusCode::Synced && n.status == SyncStatusCode::OutOfSync && o.revision == n.revision
}

fn has_condition_message(status: Option<&ApplicationStatus>, message: &str) -> bool {
    status.is_some_and(|s| s.conditions.iter().any(|c| c.message == message))
}

/// Whether a finished operation failed, carries a retry strategy and was not terminated (Argo CD does
/// not retry a terminated operation).
fn retryable(op: &OperationState) -> bool {
    matches!(op.phase, OperationPhase::Failed | OperationPhase::Error)
        && op.operation.retry.is_some()
        && !termination::was_terminated(op)
}

enum RetryVerdict {
    Due,
    Wait(Duration),
    Exhausted,
}

fn retry_verdict(op: &OperationState) -> RetryVerdict {
    let strategy = op.operation.retry.clone().unwrap_or_default();
    let Some(delay) = policy::next_retry(&strategy, op.retry_count.unwrap_or(0)) else {
        return RetryVerdict::Exhausted;
    };
    let finished = op.finished_at.as_ref().map_or(0, |t| t.0.as_millisecond());
    let elapsed = Duration::from_millis((Timestamp::now().as_millisecond() - finished).max(0) as u64);
    if elapsed >= delay {
        RetryVerdict::Due
    } else {
        RetryVerdict::Wait(delay - elapsed)
    }
}
