//! PreDelete and PostDelete hooks against the cluster: one step of a hook stage. What a stage is and
//! when it is done is decided by `engine::plan::delete_hooks` (pure); this module creates the hooks
//! and deletes them once the stage is done.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::cluster::ops::{self, ApplyOptions, Propagation};
use crate::cluster::{app_instance_id, ClusterError, ClusterHandle};
use crate::engine::object;
use crate::engine::plan::delete_hooks::{judge, stage_hooks, Stage, Verdict};

use crate::controllers::application::compare::{self, with_tracking};

/// Requeue while hooks run (their changes also wake the Application through the live cache).
pub const HOOK_POLL: Duration = Duration::from_secs(2);

/// What one step of a stage came to.
#[derive(Debug)]
pub enum StageStep {
    /// The stage is done: its finalizers may go; these live hooks are deleted afterwards.
    Done(Vec<Arc<Value>>),
    /// Hooks were created or are running (`Kind/name` of the created ones, for the event).
    Running(Vec<String>),
    /// The live cache is not complete yet.
    Waiting,
    /// A hook failed or cannot run.
    Failed(String),
}

/// One step of `stage` for the Application `app_ns/app_name`: creates the hooks not seen live yet
/// (server-side apply, tracked like any managed object) and reports where the stage stands.
pub async fn advance(
    stage: Stage,
    cluster: &ClusterHandle,
    (app_ns, app_name): (&str, &str),
    desired: &[Value],
    dest_ns: &str,
) -> Result<StageStep, ClusterError> {
    let raw: Vec<Value> = stage_hooks(desired, stage).into_iter().cloned().collect();
    if raw.is_empty() {
        return Ok(StageStep::Done(Vec::new()));
    }
    let instance = app_instance_id(app_ns, app_name);
    let kinds = compare::kinds_to_watch(&raw, &[]);
    let view = compare::observe(cluster, &instance, &kinds, &raw, dest_ns).await;
    if !view.complete {
        return Ok(StageStep::Waiting);
    }
    let hooks: Vec<Value> = raw.iter().map(|h| compare::with_namespace(h, &view, dest_ns)).collect();
    let refs: Vec<&Value> = hooks.iter().collect();
    match judge(stage, &refs, &view.own) {
        Verdict::Failed(message) => Ok(StageStep::Failed(message)),
        Verdict::Done { delete } => Ok(StageStep::Done(delete)),
        Verdict::Pending { create, .. } => {
            let opts = ApplyOptions {
                dry_run: false,
                force: true,
                validate: Some(true),
                ..ApplyOptions::default()
            };
            let mut created = Vec::new();
            for hook in create {
                ops::apply(cluster, &with_tracking(hook, app_ns, app_name), &opts).await?;
                created.push(format!("{}/{}", object::kind(hook), object::name(hook)));
            }
            Ok(StageStep::Running(created))
        }
    }
}

/// Deletes the hooks of a finished stage; failures are logged (the stage is over either way).
pub async fn delete_hooks(cluster: &ClusterHandle, hooks: &[Arc<Value>]) {
    for hook in hooks {
        if let Err(e) = super::delete::delete_live(cluster, hook, Propagation::Background).await {
            let (ns, name) = (object::namespace(hook), object::name(hook));
            tracing::warn!(error = %e, namespace = ns, name, "a completed deletion hook could not be deleted");
        }
    }
}
