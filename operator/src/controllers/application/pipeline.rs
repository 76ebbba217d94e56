//! The reconcile itself: finalizer dispatch, then the named pipeline steps (see the parent module).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::api::Patch;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::{json, Value};

use super::choice::{self, retry_verdict, retryable, ChoiceInput, Next, RetryVerdict};
use super::compare::{self, LiveView};
use super::findings::{AppEvent, Findings, ERROR_REQUEUE, RECOMPARE_REQUEUE, WAIT_REQUEUE};
use super::identity;
use super::status::{self, Problem, ProblemKind};
use super::sync::{self, StepArgs, StepResult};
use super::{auto_sync, deletion, dependencies, peers, periodic, requeue, source, State};
use crate::api::application::{
    ApplicationSource, ApplicationStatus, Operation, OperationPhase, OperationState, ResultCode, SyncStatusCode,
};
use crate::api::labels::REFRESH_ANNOTATIONS;
use crate::api::{Application, PolicySet};
use crate::cluster::{app_instance_id, ResolvedDestination};
use crate::controllers::status::{now, patch_params, write_status};
use crate::controllers::{lock, policy_access, Context, Error, KubeStep};
use crate::engine::diff::DiffOptions;
use crate::engine::object;
use crate::engine::plan::{order, LiveObject, Step};
use crate::engine::protect;
use crate::text::short_sha;

use super::executor::Owner;

/// Reconciles one Application (see the parent module).
pub async fn reconcile(app: Arc<Application>, ctx: Arc<Context>, state: Arc<State>) -> Result<Action, Error> {
    if ctx.shards().is_some_and(|s| !s.admit(&app)) {
        // Another replica's (or not yet ours): let go of what we remember of it (its owner may
        // change all of it meanwhile); the shards wake it when its cluster becomes ours.
        state.let_go(&ctx, &app);
        return Ok(Action::await_change());
    }
    let started = Instant::now();
    let result = if app.metadata.deletion_timestamp.is_some() {
        deletion::cleanup(&app, &ctx, &state).await
    } else {
        Pipeline::new(&app, &ctx, &state)?.run().await
    };
    ctx.metrics
        .app_reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    result
}

pub(super) struct Pipeline<'a> {
    app: &'a Application,
    ctx: &'a Context,
    state: &'a Arc<State>,
    api: Api<Application>,
    pub(super) ns: String,
    pub(super) name: String,
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
pub(super) struct Rendered {
    pub(super) commit: String,
    /// The render output itself, not a copy of its objects: a large Application's are megabytes.
    output: Arc<crate::render::RenderOutput>,
    source_type: crate::api::application::ApplicationSourceType,
}

impl Rendered {
    pub(super) fn objects(&self) -> &[Value] {
        &self.output.objects
    }
}

/// The live state of the destination as the later steps see it.
struct Observed {
    /// `spec.destination.namespace` (may be empty).
    dest_ns: String,
    /// The live cache's view of this Application's objects.
    view: LiveView,
    /// The rendered objects with their namespaces filled in.
    desired: Vec<Value>,
    /// The live objects with health and diff verdicts, for the planner (empty until compared).
    live: Vec<LiveObject>,
}

/// What a sync step syncs: the operation's commit and objects.
struct OperationTarget<'o> {
    revision: String,
    /// The comparison's desired objects when they are the target (borrowed: no copy of a large
    /// Application), else the operation's own render.
    objects: Cow<'o, [Value]>,
    /// The objects were rendered at `revision` (a failed render errors the operation).
    rendered: bool,
    /// They are the comparison's target (the same source at the same commit).
    same_as_target: bool,
}

impl<'a> Pipeline<'a> {
    pub(super) fn new(app: &'a Application, ctx: &'a Context, state: &'a Arc<State>) -> Result<Self, Error> {
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
        let refresh = auto_sync::refresh_requested(self.app.metadata.annotations.as_ref());
        let generation_changed =
            self.app.status.as_ref().and_then(|s| s.observed_generation) != self.app.metadata.generation;
        let force = refresh.is_some() | self.state.take_forced(self.app) | generation_changed;
        let hard = refresh == Some(true);

        // 1. destination
        let dest = match self.destination().await {
            Ok(d) => d,
            Err(p) => {
                self.found.fail_destination(p);
                return self.finish(refresh.is_some()).await;
            }
        };
        self.state.subscribe_live(&dest.cluster);
        // 2–3. resolve source, render
        let (rendered, _budget) = self.render_within_budget(force, hard).await;
        // 4. live; 5. compare, PolicySets
        let mut observed = self.observe(&dest, rendered.as_ref()).await;
        if let Some(r) = &rendered {
            self.compare(&dest, r, &mut observed);
        }
        self.timings.mark("compare");
        if let Some(r) = &rendered {
            self.evaluate_policies(r, &observed.desired).await;
        }
        // 6. choose; 7. sync step
        if let Some(op) = self.choose(rendered.as_ref()) {
            self.sync_step(&dest, &observed, op, rendered.as_ref(), (force, hard))
                .await?;
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
            .ok_or_else(|| Problem::invalid_spec("InvalidConfig", "no cluster clients configured"))?;
        let dest = clusters
            .resolve(&self.ns, &self.app.spec.destination)
            .await
            .map_err(|e| Problem::from_cluster(&e))?;
        if let Some(ns) = self.app.spec.destination.namespace.as_deref().filter(|n| !n.is_empty()) {
            dest.check_namespace(ns).map_err(|e| Problem::from_cluster(&e))?;
        }
        Ok(dest)
    }

    /// Steps 2–3 for `source` at `revision`.
    pub(super) async fn render(
        &self,
        source: &ApplicationSource,
        revision: &str,
        force: bool,
        hard: bool,
    ) -> Result<Rendered, Problem> {
        let started = std::time::Instant::now();
        let resolved = source::resolve(self.ctx, self.state, self.app, source, revision, force).await?;
        let resolved_in = started.elapsed();
        let output = source::render(self.ctx, self.app, source, &resolved, hard).await?;
        self.state.record_reads(self.app, &output.reads);
        tracing::debug!(
            resolve_ms = resolved_in.as_millis() as u64,
            render_ms = (started.elapsed() - resolved_in).as_millis() as u64,
            "source resolved and rendered"
        );
        Ok(Rendered {
            commit: resolved.commit,
            source_type: source::source_type(output.tool),
            output,
        })
    }

    /// Steps 2–3 for the target revision; a failure becomes the comparison error. A successful render
    /// also adds the finalizers its deletion hooks need, so the Application is held by them before
    /// anyone deletes it.
    async fn render_target(&mut self, force: bool, hard: bool) -> Option<Rendered> {
        let source = &self.app.spec.source;
        let rendered = self.render(source, &target_revision(source), force, hard).await;
        self.timings.mark("render");
        match rendered {
            Ok(r) => {
                if let Err(e) = deletion::finalizers::ensure_finalizers(&self.api, self.app, r.objects()).await {
                    tracing::warn!(error = %e, "adding the deletion-hook finalizers failed; retried next reconcile");
                }
                Some(r)
            }
            Err(p) => {
                self.found.fail_comparison(p);
                None
            }
        }
    }

    /// [`Self::render_target`] once this reconcile's objects fit in [`OBJECT_BUDGET`]: as many as its
    /// status lists, or, when the render has more (a first sync, a grown Application), as many as that.
    async fn render_within_budget(
        &mut self,
        force: bool,
        hard: bool,
    ) -> (Option<Rendered>, Option<tokio::sync::SemaphorePermit<'static>>) {
        let listed = self.app.status.as_ref().map_or(0, |s| s.resources.len());
        let budget = reserve_objects(listed).await;
        let rendered = self.render_target(force, hard).await;
        let count = rendered.as_ref().map_or(0, |r| r.objects().len());
        if count <= listed.max(1) {
            return (rendered, budget);
        }
        drop(budget);
        (rendered, reserve_objects(count).await)
    }

    /// Step 4: the live objects of this instance from the live cache (never a cluster-wide list); an
    /// incomplete cache makes the planner wait.
    async fn observe(&mut self, dest: &ResolvedDestination, rendered: Option<&Rendered>) -> Observed {
        let dest_ns = self.app.spec.destination.namespace.clone().unwrap_or_default();
        let desired_raw: &[Value] = rendered.map(Rendered::objects).unwrap_or_default();
        let view = compare::observe_app(&dest.cluster, self.app, desired_raw, &dest_ns).await;
        self.timings.mark("live");
        let desired = desired_raw
            .iter()
            .map(|o| compare::with_namespace(o, &view, &dest_ns))
            .collect();
        if !view.complete {
            self.found.requeue_within(WAIT_REQUEUE);
        }
        Observed {
            dest_ns,
            view,
            desired,
            live: Vec::new(),
        }
    }

    /// Step 5: diff and health per resource, aggregated; the Cluster's namespace allow-list checked for
    /// every desired object.
    fn compare(&mut self, dest: &ResolvedDestination, rendered: &Rendered, observed: &mut Observed) {
        let opts = DiffOptions::with_ignore_differences(&self.app.spec.ignore_differences);
        let comparison = compare::compare(
            &self.ns,
            &self.name,
            &rendered.commit,
            &observed.desired,
            &observed.view,
            &opts,
        );
        let mut compared = comparison.compared;
        compared.source_type = Some(rendered.source_type);
        observed.live = comparison.live;
        if let Some(p) = namespace_violation(dest, &observed.desired) {
            self.found.invalid_spec = Some(p);
        }
        self.found.compared = Some(compared);
    }

    /// Step 5b: the PolicySets that apply, evaluated against the Application and each rendered object
    /// (off the async runtime: Rego is CPU-bound). Blocks syncs until the PolicySet cache has listed.
    async fn evaluate_policies(&mut self, rendered: &Rendered, desired: &[Value]) {
        if !self.state.policies_synced() {
            self.found.policy_sets_pending = true;
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
        self.found.policy_sets = Some(findings);
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

    /// Step 6: the operation to advance this reconcile, if any ([`choice::choose`], pure); what it
    /// found on the way goes to the findings.
    fn choose(&mut self, rendered: Option<&Rendered>) -> Option<(Operation, Option<OperationState>)> {
        let gate = self.found.policy_gate();
        let target = rendered
            .zip(self.found.compared.as_ref())
            .map(|(r, c)| (r.commit.as_str(), c));
        let dependencies = self.dependencies();
        let status = self.app.status.as_ref();
        let input = ChoiceInput {
            current: status.and_then(|s| s.operation_state.as_ref()),
            requested: self.app.operation.as_ref(),
            history: status.map(|s| s.history.as_slice()).unwrap_or_default(),
            sync_policy: self.app.spec.sync_policy.as_ref(),
            sync_timeout: self.ctx.settings.sync_timeout,
            gate: &gate,
            target,
            blocked: self.found.comparison_error.is_some() || self.found.invalid_spec.is_some(),
            self_heal_attempts: target.map_or(0, |(commit, _)| self.state.self_heal_attempts(self.app, commit)),
            dependencies: &dependencies,
        };
        let choice = choice::choose(&input, Timestamp::now());
        if let (
            Next::Start {
                self_heal: Some(self_heal),
                ..
            },
            Some((commit, _)),
        ) = (&choice.next, target)
        {
            self.state.count_self_heal(self.app, commit, *self_heal);
        }
        if let Some(after) = choice.requeue {
            self.found.requeue_within(after);
        }
        if let Some(note) = choice.denied {
            self.found.events.push((EventType::Warning, "SyncDenied", note));
        }
        self.found.sync_error = choice.sync_error.or(self.found.sync_error.take());
        self.found.dependency = choice.dependency.or(self.found.dependency.take());
        self.found.clear_operation |= choice.clear_operation;
        choice.next.into_step()
    }

    /// `spec.dependsOn` among the namespace's Applications (ready when it names none).
    fn dependencies(&self) -> dependencies::Verdict {
        if self.app.spec.depends_on.is_empty() {
            return dependencies::Verdict::Ready;
        }
        let mut peers = peers(&self.state.applications(), &self.ns);
        peers.entry(self.name.clone()).or_insert_with(|| dependencies::Peer {
            depends_on: self.app.spec.depends_on.clone(),
            ..Default::default()
        });
        dependencies::check(&self.name, &peers)
    }

    /// Step 7: one sync step of `op` (see [`sync`] for the write-ahead contract).
    async fn sync_step(
        &mut self,
        dest: &ResolvedDestination,
        observed: &Observed,
        (op, state): (Operation, Option<OperationState>),
        target: Option<&Rendered>,
        (force, hard): (bool, bool),
    ) -> Result<(), Error> {
        if self.found.invalid_spec.is_some() && state.is_none() {
            return Ok(());
        }
        let synced = self
            .operation_target(observed, &op, state.as_ref(), target, (force, hard))
            .await;
        if let Some(refusal) = self
            .stored_versions_refusal(dest, &synced.objects, &observed.view)
            .await
        {
            self.found.sync_error = Some(refusal);
            self.found.requeue_within(ERROR_REQUEUE);
            return Ok(());
        }
        let namespace_live = self.namespace_live(dest, &op, &observed.dest_ns).await;
        let is_new = state.is_none() || state.as_ref().is_some_and(|s| s.sync_result.is_none());
        let args = StepArgs {
            owner: Owner {
                namespace: &self.ns,
                name: &self.name,
                operator_namespace: &self.ctx.settings.namespace,
            },
            destination_namespace: &observed.dest_ns,
            revision: &synced.revision,
            desired: &synced.objects,
            live: &observed.live,
            view: &observed.view,
            namespace_live: namespace_live.as_ref(),
            operation: &op,
            sync_policy: self.app.spec.sync_policy.as_ref(),
            state: state.as_ref(),
            wave_delay: self.ctx.settings.wave_delay,
            rendered: synced.rendered,
            prune_confirmed: prune_confirmed(self.app),
        };
        let (result, written) = match self.run_step(dest, &args).await? {
            Ok(step) => step,
            Err(p) => {
                // A requested operation (`operation`, a manual sync) or one already running fails: left
                // pending it would wait for the ServiceAccount forever. An automated sync not yet started
                // only reports `SyncError` and is tried again at the next reconcile.
                let ended = (self.app.operation.is_some() || state.is_some())
                    .then(|| sync::without_writer(&args, &p.message, Timestamp::now()));
                self.no_writer(ended, state.as_ref(), &synced.revision, p);
                return Ok(());
            }
        };
        if let Some(w) = written {
            self.written = Some(w);
        }
        if is_new {
            let by = if op.initiated_by.as_ref().is_some_and(|i| i.automated) {
                "automated sync"
            } else {
                "user"
            };
            let note = format!("{by} started a sync to {}", short_sha(&synced.revision));
            self.found.events.push((EventType::Normal, "SyncStarted", note));
        }
        self.after_step(&result, state.as_ref(), &synced.revision);
        let succeeded_now =
            result.state.phase == OperationPhase::Succeeded && state.as_ref().is_none_or(|s| !sync::is_completed(s));
        if succeeded_now && synced.same_as_target && !result.applied.is_empty() {
            self.compare_after_sync(&observed.view, &synced.objects, &synced.revision, &result.applied);
        }
        Ok(())
    }

    /// No writer could be had for a step (see [`identity::writer`]); nothing was written. `ended` is the
    /// operation that ends for it, if one does.
    fn no_writer(&mut self, ended: Option<StepResult>, state: Option<&OperationState>, revision: &str, p: Problem) {
        if let Some(result) = ended {
            self.after_step(&result, state, revision);
        }
        self.found.sync_error = Some(p);
        self.found.requeue_within(ERROR_REQUEUE);
    }

    /// The commit and objects `op` syncs: the comparison's when it syncs the same source at the same
    /// commit, else its own render (a rollback, a pinned revision); a failed render is a comparison
    /// error and errors the operation without applying or pruning anything.
    async fn operation_target<'o>(
        &mut self,
        observed: &'o Observed,
        op: &Operation,
        state: Option<&OperationState>,
        target: Option<&Rendered>,
        (force, hard): (bool, bool),
    ) -> OperationTarget<'o> {
        let sync_op = op.sync.clone().unwrap_or_default();
        let source = sync_op.source.clone().unwrap_or_else(|| self.app.spec.source.clone());
        let wanted = state
            .and_then(|s| s.sync_result.as_ref())
            .map(|r| r.revision.clone())
            .filter(|r| !r.is_empty())
            .or(sync_op.revision.clone())
            .unwrap_or_else(|| target_revision(&source));
        let same_as_target = source == self.app.spec.source
            && target.is_some_and(|t| t.commit == wanted || target_revision(&source) == wanted);
        let (revision, objects, rendered) = match target {
            Some(t) if same_as_target => (t.commit.clone(), Cow::Borrowed(observed.desired.as_slice()), true),
            _ => match self.render(&source, &wanted, force, hard).await {
                Ok(r) => {
                    let objects = r
                        .objects()
                        .iter()
                        .map(|o| compare::with_namespace(o, &observed.view, &observed.dest_ns))
                        .collect();
                    (r.commit, Cow::Owned(objects), true)
                }
                Err(p) => {
                    self.found.fail_comparison(p);
                    (wanted, Cow::Owned(Vec::new()), false)
                }
            },
        };
        OperationTarget {
            revision,
            objects,
            rendered,
            same_as_target,
        }
    }

    /// The sync's pre-flight guard on CRD versions: a desired CRD that drops a version its live object
    /// still lists in `status.storedVersions` refuses the whole sync before anything is written
    /// ([`protect::stored_versions_refusal`]). The live CRD comes from the live cache, or, when the
    /// cache does not hold it (not tracked yet: applied by `capstan bootstrap` or by hand), from one
    /// GET; a CRD that cannot be read is left to the API server's own validation.
    async fn stored_versions_refusal(
        &self,
        dest: &ResolvedDestination,
        desired: &[Value],
        view: &LiveView,
    ) -> Option<Problem> {
        let mut pairs: Vec<(&Value, Arc<Value>)> = Vec::new();
        for crd in desired.iter().filter(|o| order::is_crd(o)) {
            let key = object::ObjectKey::of(crd);
            let cached = view
                .own
                .iter()
                .chain(&view.others)
                .find(|o| object::ObjectKey::of(o) == key);
            let live = match cached {
                Some(found) => Some(Arc::clone(found)),
                None => {
                    let gvk =
                        kube::core::GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition");
                    let got = crate::cluster::ops::get(&dest.cluster, &gvk, "", object::name(crd)).await;
                    got.ok().flatten().map(Arc::new)
                }
            };
            pairs.extend(live.map(|l| (crd, l)));
        }
        let refusal = protect::stored_versions_refusal(pairs.iter().map(|(d, l)| (*d, l.as_ref())))?;
        Some(Problem::new(protect::REASON_STORED_VERSION_REMOVED, refusal))
    }

    /// Decides, persists (write-ahead) and executes one step as the Application's writer; returns the
    /// result and the write-ahead status, if written (the base of this reconcile's status write), or why
    /// no writer could be had (nothing was written then).
    async fn run_step(
        &self,
        dest: &ResolvedDestination,
        args: &StepArgs<'_>,
    ) -> Result<Result<(StepResult, Option<ApplicationStatus>), Problem>, Error> {
        // Every write of the step goes through the writer (identity::writer); nothing starts without it.
        let writer = match identity::writer(self.ctx, self.app, &dest.cluster).await {
            Ok(w) => w,
            Err(p) => return Ok(Err(p)),
        };
        let (api, app) = (self.api.clone(), self.app);
        let base = self.written.clone();
        let written = std::sync::Mutex::new(None);
        let result = sync::run(&writer, args, |op_state| {
            let mut next = base.clone().unwrap_or_default();
            next.operation_state = Some(op_state);
            let written = &written;
            async move {
                write_status(&api, app, base.as_ref(), &next)
                    .await
                    .map_err(KubeStep::WriteAhead.err())?;
                *lock(written) = Some(next);
                Ok(())
            }
        })
        .await?;
        let written = lock(&written).take();
        Ok(Ok((result, written)))
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
    fn after_step(&mut self, result: &StepResult, before: Option<&OperationState>, revision: &str) {
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
        if let Some(after) = result.step.requeue_after(self.ctx.settings.wave_delay) {
            self.found.requeue_within(after);
        }
        if sync::is_completed(op) && before.is_none_or(|b| !sync::is_completed(b)) {
            self.finished(result, revision);
        }
        self.found.operation_state = Some(op.clone());
    }

    /// An operation finished in this step: the metric, the event, the history entry, the requested
    /// `operation` removed (unless a retry is pending), and a prompt re-compare.
    fn finished(&mut self, result: &StepResult, revision: &str) {
        let op = &result.state;
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
        let retry = retryable(op).then(|| retry_verdict(op, Timestamp::now()));
        let retry_pending = retry.is_some_and(|v| v != RetryVerdict::Exhausted);
        if self.app.operation.is_some() && !retry_pending {
            self.found.clear_operation = true;
        }
        if let Some(RetryVerdict::Wait(d)) = retry {
            self.found.requeue_within(d);
        }
        // Re-compare right away: the sync changed the live state.
        self.found.requeue_within(RECOMPARE_REQUEUE);
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

    /// Step 8: ONE status write (none when unchanged), metadata clean-up, events, metrics; then the
    /// requeue, or the comparison failure as the reconcile's error (after the write, so the status
    /// always says what failed).
    async fn finish(mut self, refreshed: bool) -> Result<Action, Error> {
        let found = std::mem::take(&mut self.found);
        let new = status::compute(&found.status_input(self.app, now()));
        write_status(&self.api, self.app, self.written.as_ref(), &new)
            .await
            .map_err(KubeStep::StatusWrite.err())?;
        self.clean_metadata(refreshed, found.clear_operation).await?;
        let problems = (found.comparison_error.as_ref(), found.sync_error.as_ref());
        self.publish_events(found.events.clone(), problems, &new).await;
        self.record_info(&new);
        self.timings.mark("status");
        tracing::debug!(
            namespace = %self.ns,
            name = %self.name,
            requeue_ms = found.requeue().map(|d| d.as_millis() as u64),
            "reconcile phases: {}",
            self.timings.summary()
        );
        if let Some(failure) = found.failure() {
            return Err(failure);
        }
        Ok(requeue(
            found.requeue(),
            periodic(self.ctx.settings.reconcile_interval, self.app),
        ))
    }

    /// The events of this reconcile, plus `DriftDetected`, a new `SyncError`, and a new refusal of the spec
    /// found while comparing (a refused repository URL or tool field, named by its reason), so `kubectl
    /// describe` says why nothing was rendered.
    async fn publish_events(
        &self,
        mut events: Vec<AppEvent>,
        (comparison_error, sync_error): (Option<&Problem>, Option<&Problem>),
        new: &ApplicationStatus,
    ) {
        if drifted(self.app.status.as_ref(), new) {
            events.push((
                EventType::Normal,
                "DriftDetected",
                "the live state drifted from Git (OutOfSync at the same revision)".into(),
            ));
        }
        if let Some(p) = sync_error.filter(|p| !has_condition_message(self.app.status.as_ref(), &p.message)) {
            events.push((EventType::Warning, "SyncError", p.message.clone()));
        }
        if let Some(p) = comparison_error
            .filter(|p| p.kind == ProblemKind::InvalidSpec)
            .filter(|p| !has_condition_message(self.app.status.as_ref(), &p.message))
        {
            events.push((EventType::Warning, p.reason, p.message.clone()));
        }
        for (kind, reason, note) in events {
            self.ctx
                .publish_event(&super::event_ref(self.app), kind, reason, "Sync", &note)
                .await;
        }
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
            Err(e) => Err(KubeStep::MetadataPatch.err()(e)),
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
            auto_sync::automated(spec.sync_policy.as_ref()).is_some().to_string(),
        ];
        self.state.record_info(self.ctx, self.app, labels);
    }
}

/// How many managed objects all reconciles together may hold past their render (desired copies, live
/// objects, comparison, plan, applied results). A reconcile of a large Application holds each of them
/// thousands of times over, and `--app-concurrency` such reconciles at once made most of the operator's
/// peak memory (S1 heap profile at 10 × 1,000: the syncs' copies were over two thirds of the peak heap).
/// Small Applications never wait for it; five 1,000-object ones proceed together, with 16 applies each in
/// flight, plenty to keep the API server busy.
const OBJECT_BUDGET: usize = 5_000;

/// Process-wide: memory is the process's.
static OBJECT_PERMITS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(OBJECT_BUDGET);

/// Waits until `objects` more fit in [`OBJECT_BUDGET`] (one at least). An Application larger than the
/// budget takes all of it, and runs alone. The wait is bounded by the other reconciles' own bounds.
async fn reserve_objects(objects: usize) -> Option<tokio::sync::SemaphorePermit<'static>> {
    let weight = objects.clamp(1, OBJECT_BUDGET) as u32;
    // The semaphore is never closed; a closed one would only mean no limit.
    OBJECT_PERMITS.acquire_many(weight).await.ok()
}

/// The target revision, `HEAD` when unset.
pub(super) fn target_revision(source: &ApplicationSource) -> String {
    source
        .target_revision
        .clone()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "HEAD".into())
}

/// A desired object's namespace outside the Cluster's allow-list (sync refused).
fn namespace_violation(dest: &ResolvedDestination, desired: &[Value]) -> Option<Problem> {
    if dest.allowed_namespaces.is_empty() {
        return None;
    }
    desired
        .iter()
        .filter(|o| !object::is_skipped(o))
        .find_map(|o| dest.check_namespace(object::namespace(o)).err())
        .map(|e| Problem::from_cluster(&e))
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
    // A condition holds the message bounded (`text::truncate`): its cut form counts as the same message.
    let same = |shown: &str| {
        shown == message
            || shown
                .strip_suffix(crate::text::CUT_MARKER)
                .is_some_and(|cut| message.starts_with(cut))
    };
    status.is_some_and(|s| s.conditions.iter().any(|c| same(&c.message)))
}
