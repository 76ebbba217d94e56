//! PreDelete and PostDelete hooks (Argo CD's deletion hooks), the pure part: which hooks a stage has,
//! which finalizers hold the Application for them, and where a stage stands given the live objects.
//!
//! Deleting an Application whose manifests hold such hooks goes:
//! 1. PreDelete hooks are created and must all complete (Healthy); a failed one stops the deletion
//!    with `DeletionError` (the way out is the same as for any wedged deletion);
//! 2. the managed resources are deleted (cascade finalizer) or left (none);
//! 3. PostDelete hooks are created and must complete; then they are deleted.
//!
//! Each stage is held by its own finalizer, added while the Application is alive and its manifests
//! have hooks of that stage (a deleted object cannot gain finalizers), and removed when the stage is
//! done. Removing the finalizer before deleting the stage's hooks means a hook never runs twice: a
//! later reconcile does not see the stage any more.

use std::sync::Arc;

use serde_json::Value;

use super::step::hook_phase;
use super::LiveObject;
use crate::api::application::{HookType, OperationPhase};
use crate::engine::health;
use crate::engine::object::{self, ObjectKey};

/// Capstan's finalizer for the PreDelete stage.
pub const PRE_DELETE_FINALIZER: &str = "capstan.dev/pre-delete-hooks";
/// Capstan's finalizer for the PostDelete stage.
pub const POST_DELETE_FINALIZER: &str = "capstan.dev/post-delete-hooks";
/// Argo CD's PreDelete finalizer (honoured when present).
pub const ARGO_PRE_DELETE_FINALIZER: &str = "pre-delete-finalizer.argocd.argoproj.io";
/// Argo CD's PostDelete finalizer (honoured when present).
pub const ARGO_POST_DELETE_FINALIZER: &str = "post-delete-finalizer.argocd.argoproj.io";

/// A deletion stage that runs hooks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Before the managed resources are deleted.
    PreDelete,
    /// After they are gone.
    PostDelete,
}

impl Stage {
    /// The hook type of the stage.
    pub fn hook_type(self) -> HookType {
        match self {
            Stage::PreDelete => HookType::PreDelete,
            Stage::PostDelete => HookType::PostDelete,
        }
    }

    /// The finalizers that hold the Application for this stage (Capstan's first).
    pub fn finalizers(self) -> [&'static str; 2] {
        match self {
            Stage::PreDelete => [PRE_DELETE_FINALIZER, ARGO_PRE_DELETE_FINALIZER],
            Stage::PostDelete => [POST_DELETE_FINALIZER, ARGO_POST_DELETE_FINALIZER],
        }
    }

    /// Whether `finalizers` hold the Application for this stage.
    pub fn is_held(self, finalizers: &[String]) -> bool {
        finalizers.iter().any(|f| self.finalizers().contains(&f.as_str()))
    }
}

/// The hooks of `stage` among the rendered objects.
pub fn stage_hooks(desired: &[Value], stage: Stage) -> Vec<&Value> {
    desired
        .iter()
        .filter(|o| object::hook_types(o).contains(&stage.hook_type()))
        .collect()
}

/// The finalizers an alive Application must gain: one per stage its manifests have hooks for and no
/// finalizer holds yet.
pub fn missing_finalizers(desired: &[Value], finalizers: &[String]) -> Vec<&'static str> {
    [Stage::PreDelete, Stage::PostDelete]
        .into_iter()
        .filter(|s| !stage_hooks(desired, *s).is_empty() && !s.is_held(finalizers))
        .map(|s| s.finalizers()[0])
        .collect()
}

/// Where a stage stands.
#[derive(Debug, PartialEq)]
pub enum Verdict<'a> {
    /// Hooks still to create, and names of hooks still running.
    Pending {
        /// Hooks not (yet) seen live.
        create: Vec<&'a Value>,
        /// `Kind/name` of the running ones.
        running: Vec<String>,
    },
    /// A hook failed, or cannot run: the message says which and why.
    Failed(String),
    /// Every hook completed; the live hooks to delete once the stage's finalizer is removed.
    Done {
        /// The live hook objects.
        delete: Vec<Arc<Value>>,
    },
}

/// Where `stage` stands, given its `hooks` (namespaces already set) and the Application's `live` objects.
pub fn judge<'a>(stage: Stage, hooks: &[&'a Value], live: &[Arc<Value>]) -> Verdict<'a> {
    let mut create = Vec::new();
    let mut running = Vec::new();
    let mut failed = Vec::new();
    let mut done = Vec::new();
    for hook in hooks {
        let what = format!("{}/{}", object::kind(hook), object::name(hook));
        if object::name(hook).is_empty() {
            failed.push(format!(
                "{stage:?} hook {} has no metadata.name (generateName is not supported for deletion hooks)",
                object::kind(hook)
            ));
            continue;
        }
        let key = ObjectKey::of(hook);
        let Some(found) = live.iter().find(|l| ObjectKey::of(l) == key) else {
            create.push(*hook);
            continue;
        };
        let observed = LiveObject {
            object: Arc::clone(found),
            health: health::assess(found),
            in_sync: false,
        };
        match hook_phase(&observed) {
            (OperationPhase::Succeeded, _) => done.push(Arc::clone(found)),
            (OperationPhase::Failed | OperationPhase::Error, message) => failed.push(format!(
                "{stage:?} hook {what} failed{}",
                message.map(|m| format!(": {m}")).unwrap_or_default()
            )),
            _ => running.push(what),
        }
    }
    if !failed.is_empty() {
        Verdict::Failed(failed.join("; "))
    } else if !create.is_empty() || !running.is_empty() {
        Verdict::Pending { create, running }
    } else {
        Verdict::Done { delete: done }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn job(name: &str, hook: &str) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": name, "namespace": "apps", "annotations": {"argocd.argoproj.io/hook": hook}}})
    }

    fn live_job(name: &str, condition: Option<&str>) -> Arc<Value> {
        let mut j = job(name, "PreDelete");
        j["status"] = match condition {
            Some(c) => json!({"conditions": [{"type": c, "status": "True", "message": "exit 1"}]}),
            None => json!({"active": 1}),
        };
        Arc::new(j)
    }

    #[test]
    fn stages_pick_their_hooks_and_the_missing_finalizers() {
        let desired = vec![
            job("pre", "PreDelete"),
            job("post", "PostDelete"),
            job("sync", "PreSync"),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
        ];
        assert_eq!(stage_hooks(&desired, Stage::PreDelete).len(), 1);
        assert_eq!(stage_hooks(&desired, Stage::PostDelete).len(), 1);
        assert_eq!(
            missing_finalizers(&desired, &[]),
            vec![PRE_DELETE_FINALIZER, POST_DELETE_FINALIZER]
        );
        // Argo CD's finalizer holds the stage as well as Capstan's.
        assert_eq!(
            missing_finalizers(&desired, &[ARGO_PRE_DELETE_FINALIZER.to_string()]),
            vec![POST_DELETE_FINALIZER]
        );
        assert!(
            missing_finalizers(&desired[2..], &[]).is_empty(),
            "no deletion hooks, no finalizer"
        );
    }

    #[test]
    fn a_stage_creates_waits_fails_and_completes() {
        let hooks = [job("a", "PreDelete"), job("b", "PreDelete")];
        let refs: Vec<&Value> = hooks.iter().collect();
        match judge(Stage::PreDelete, &refs, &[]) {
            Verdict::Pending { create, running } => {
                assert_eq!(create.len(), 2);
                assert!(running.is_empty());
            }
            other => panic!("{other:?}"),
        }
        let live = [live_job("a", Some("Complete")), live_job("b", None)];
        assert_eq!(
            judge(Stage::PreDelete, &refs, &live),
            Verdict::Pending {
                create: vec![],
                running: vec!["Job/b".into()]
            }
        );
        let live = [live_job("a", Some("Complete")), live_job("b", Some("Failed"))];
        match judge(Stage::PreDelete, &refs, &live) {
            Verdict::Failed(m) => assert!(m.starts_with("PreDelete hook Job/b failed"), "{m}"),
            other => panic!("{other:?}"),
        }
        let live = [live_job("a", Some("Complete")), live_job("b", Some("Complete"))];
        match judge(Stage::PreDelete, &refs, &live) {
            Verdict::Done { delete } => assert_eq!(delete.len(), 2),
            other => panic!("{other:?}"),
        }
        // No hooks: done at once.
        assert_eq!(judge(Stage::PostDelete, &[], &[]), Verdict::Done { delete: vec![] });
    }

    #[test]
    fn a_hook_without_a_name_is_a_clear_failure() {
        let hook = json!({"apiVersion": "batch/v1", "kind": "Job",
                          "metadata": {"generateName": "cleanup-", "annotations": {"argocd.argoproj.io/hook": "PostDelete"}}});
        match judge(Stage::PostDelete, &[&hook], &[]) {
            Verdict::Failed(m) => assert!(m.contains("generateName is not supported"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
