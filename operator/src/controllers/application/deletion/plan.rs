//! The pure half of the cascade deletion: what the finalizers ask for, which tracked objects the
//! guards hold back, and which objects go next. No I/O; the pipeline in the parent module acts on
//! what these functions decide.
//!
//! Finalizers (any one turns cascade deletion on; without one the resources are orphaned):
//! - `capstan.dev/resources` and Argo CD's `resources-finalizer.argocd.argoproj.io` (also with the
//!   `/foreground` suffix): foreground propagation (dependents first);
//! - `capstan.dev/resources-background` and `resources-finalizer.argocd.argoproj.io/background`:
//!   background propagation.
//!
//! The PreDelete and PostDelete hook stages have finalizers of their own
//! (`engine::plan::delete_hooks`); the stages run PreDelete → cascade → PostDelete, one stage at a
//! time, each ending with the removal of its own finalizers.

use std::sync::Arc;

use kube::ResourceExt;
use serde_json::Value;

use crate::api::labels::RESOURCES_FINALIZER;
use crate::api::Application;
use crate::cluster::ops::Propagation;
use crate::engine::object;
use crate::engine::plan::delete_hooks::Stage as HookStage;
use crate::engine::plan::order::kind_rank;
use crate::engine::protect::{self, Protection, Removal};

/// Capstan's background-propagation variant of [`RESOURCES_FINALIZER`].
pub const RESOURCES_FINALIZER_BACKGROUND: &str = "capstan.dev/resources-background";
/// Argo CD's resources finalizer (foreground).
pub const ARGO_FINALIZER: &str = "resources-finalizer.argocd.argoproj.io";
/// Argo CD's explicit foreground variant.
pub const ARGO_FINALIZER_FOREGROUND: &str = "resources-finalizer.argocd.argoproj.io/foreground";
/// Argo CD's background variant.
pub const ARGO_FINALIZER_BACKGROUND: &str = "resources-finalizer.argocd.argoproj.io/background";
/// Every finalizer that asks for cascade deletion.
pub const CASCADE_FINALIZERS: [&str; 5] = [
    RESOURCES_FINALIZER,
    RESOURCES_FINALIZER_BACKGROUND,
    ARGO_FINALIZER,
    ARGO_FINALIZER_FOREGROUND,
    ARGO_FINALIZER_BACKGROUND,
];
/// Annotation: `orphan` removes the finalizers without deleting anything or running a hook (the way
/// out of a wedged deletion).
pub const DELETION_POLICY_ANNOTATION: &str = "capstan.dev/deletion-policy";

/// What a deleted Application's finalizers ask for.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// None of the finalizers Capstan handles is held: nothing to do.
    Nothing,
    /// `capstan.dev/deletion-policy: orphan`: every finalizer goes, nothing is deleted, no hook runs.
    Orphan,
    /// The Application manages itself (its recorded resources list it): deleting it cascades nothing,
    /// like an orphan deletion. Its resources are the installation that runs it; deleting them one by
    /// one is what `capstan uninstall` is for.
    SelfManaged,
    /// The stage to run now.
    Run(Stage),
}

/// One stage of a cleanup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// PreDelete or PostDelete hooks.
    Hooks(HookStage),
    /// The cascade deletion of the managed resources, with this propagation.
    Cascade(Propagation),
}

/// The next stage `app`'s finalizers hold it for: PreDelete hooks, then the cascade, then
/// PostDelete hooks (see the module doc).
pub fn decide(app: &Application) -> Decision {
    let finalizers = app.finalizers();
    let cascade = cascade_finalizers(app);
    if cascade.is_empty() && !HookStage::PreDelete.is_held(finalizers) && !HookStage::PostDelete.is_held(finalizers) {
        return Decision::Nothing;
    }
    if orphan_requested(app) {
        return Decision::Orphan;
    }
    if manages_itself(app) {
        return Decision::SelfManaged;
    }
    if HookStage::PreDelete.is_held(finalizers) {
        Decision::Run(Stage::Hooks(HookStage::PreDelete))
    } else if !cascade.is_empty() {
        Decision::Run(Stage::Cascade(propagation(&cascade)))
    } else {
        Decision::Run(Stage::Hooks(HookStage::PostDelete))
    }
}

/// The finalizers that hold `app` for `stage` (removed when the stage is done).
pub fn stage_finalizers(app: &Application, stage: Stage) -> Vec<String> {
    match stage {
        Stage::Hooks(s) => s.finalizers().iter().map(|f| f.to_string()).collect(),
        Stage::Cascade(_) => cascade_finalizers(app),
    }
}

/// Every finalizer the cleanup handles (all of them go on a release).
pub fn handled_finalizers() -> Vec<&'static str> {
    let mut names: Vec<&str> = CASCADE_FINALIZERS.to_vec();
    names.extend(HookStage::PreDelete.finalizers());
    names.extend(HookStage::PostDelete.finalizers());
    names
}

/// Whether any finalizer the cleanup handles is left once `removed` are gone (a later stage).
pub fn later_stages(app: &Application, removed: &[String]) -> bool {
    let handled = handled_finalizers();
    app.finalizers()
        .iter()
        .any(|f| !removed.contains(f) && handled.contains(&f.as_str()))
}

/// The cascade finalizers `app` carries.
pub fn cascade_finalizers(app: &Application) -> Vec<String> {
    app.finalizers()
        .iter()
        .filter(|f| CASCADE_FINALIZERS.contains(&f.as_str()))
        .cloned()
        .collect()
}

/// Propagation asked for by the finalizers (background only if every cascade finalizer says so).
pub fn propagation(finalizers: &[String]) -> Propagation {
    let background = !finalizers.is_empty()
        && finalizers
            .iter()
            .all(|f| f == RESOURCES_FINALIZER_BACKGROUND || f == ARGO_FINALIZER_BACKGROUND);
    if background {
        Propagation::Background
    } else {
        Propagation::Foreground
    }
}

/// Whether `capstan.dev/deletion-policy: orphan` is set.
pub fn orphan_requested(app: &Application) -> bool {
    app.annotations()
        .get(DELETION_POLICY_ANNOTATION)
        .is_some_and(|v| v.eq_ignore_ascii_case("orphan"))
}

/// Whether `app`'s recorded resources list `app` itself (a self-managing Application).
pub fn manages_itself(app: &Application) -> bool {
    let (ns, name) = (app.namespace(), app.name_any());
    let resources = app.status.as_ref().map(|s| s.resources.as_slice()).unwrap_or_default();
    resources.iter().any(|r| {
        r.group.as_deref() == Some(crate::api::GROUP) && r.kind == "Application" && r.name == name && r.namespace == ns
    })
}

/// The protect step: of the live objects, those tracked by `who`'s Application that a cascade
/// deletion may delete, and the messages of the guards that hold the others back
/// (`engine::protect`). Objects another Application tracks are not this cleanup's business.
pub fn protect<'v>(who: &Protection<'_>, live: &'v [Arc<Value>]) -> (Vec<&'v Value>, Vec<String>) {
    let mut held = Vec::new();
    let owned = live
        .iter()
        .map(|o| o.as_ref())
        .filter(|o| object::is_tracked_by(o, who.app_namespace, who.app_name))
        .filter(|o| match protect::guard(who, o, Removal::Cascade) {
            Some(g) => {
                held.push(g.message(o));
                false
            }
            None => true,
        })
        .collect();
    (owned, held)
}

/// What the cascade does next with the objects it may delete.
#[derive(Debug, PartialEq)]
pub enum Wave<'v> {
    /// Nothing is left: the stage is done.
    Done,
    /// Objects are terminating: wait for them before the next wave.
    Terminating(usize),
    /// Delete these: every object of the highest sync wave left, in reverse kind order.
    Delete(Vec<&'v Value>),
}

/// The next wave of a cascade deletion, Argo CD's order: resources go in reverse sync-wave order (what
/// was created last goes first), one wave at a time, and a wave starts only once nothing of the
/// previous one is terminating. Within a wave the deletes are issued in reverse kind order (workloads
/// before the ConfigMaps and Secrets they use, Namespaces last).
pub fn next_wave<'v>(deletable: &[&'v Value]) -> Wave<'v> {
    let terminating = deletable.iter().filter(|o| is_terminating(o)).count();
    if terminating > 0 {
        return Wave::Terminating(terminating);
    }
    let Some(top) = deletable.iter().map(|o| object::sync_wave(o)).max() else {
        return Wave::Done;
    };
    let mut wave: Vec<&Value> = deletable
        .iter()
        .copied()
        .filter(|o| object::sync_wave(o) == top)
        .collect();
    wave.sort_by(|a, b| {
        kind_rank(object::kind(b))
            .cmp(&kind_rank(object::kind(a)))
            .then_with(|| object::name(a).cmp(object::name(b)))
    });
    Wave::Delete(wave)
}

fn is_terminating(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
}

/// The managed resources a cleanup leaves behind, for an event (the first 20).
pub fn orphans(app: &Application) -> String {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn app(finalizers: &[&str], annotations: &[(&str, &str)]) -> Application {
        serde_json::from_value(json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
            "metadata": {"name": "a", "namespace": "n",
                         "finalizers": finalizers,
                         "annotations": annotations.iter().map(|(k, v)| (k.to_string(), json!(v)))
                             .collect::<serde_json::Map<_, _>>()},
            "spec": {"source": {"repoURL": "https://example.com/r.git"},
                     "destination": {"server": "https://kubernetes.default.svc"}}
        }))
        .expect("an Application")
    }

    #[test]
    fn the_finalizers_decide_the_stage() {
        use crate::engine::plan::delete_hooks::{POST_DELETE_FINALIZER, PRE_DELETE_FINALIZER};
        assert_eq!(decide(&app(&["other.example.com/x"], &[])), Decision::Nothing);
        let all = [PRE_DELETE_FINALIZER, RESOURCES_FINALIZER, POST_DELETE_FINALIZER];
        assert_eq!(
            decide(&app(&all, &[])),
            Decision::Run(Stage::Hooks(HookStage::PreDelete))
        );
        assert_eq!(
            decide(&app(&all[1..], &[])),
            Decision::Run(Stage::Cascade(Propagation::Foreground))
        );
        assert_eq!(
            decide(&app(&[ARGO_FINALIZER_BACKGROUND, POST_DELETE_FINALIZER], &[])),
            Decision::Run(Stage::Cascade(Propagation::Background))
        );
        assert_eq!(
            decide(&app(&all[2..], &[])),
            Decision::Run(Stage::Hooks(HookStage::PostDelete))
        );
        assert_eq!(
            decide(&app(&all, &[(DELETION_POLICY_ANNOTATION, "Orphan")])),
            Decision::Orphan
        );
        let mut own = app(&all, &[]);
        let me = serde_json::json!({"group": "capstan.dev", "kind": "Application", "namespace": "n", "name": "a"});
        let other = serde_json::json!({"group": "capstan.dev", "kind": "Application", "namespace": "n", "name": "b"});
        own.status = Some(serde_json::from_value(json!({"resources": [other]})).expect("a status"));
        assert_eq!(decide(&own), Decision::Run(Stage::Hooks(HookStage::PreDelete)));
        own.status = Some(serde_json::from_value(json!({"resources": [other, me]})).expect("a status"));
        assert_eq!(
            decide(&own),
            Decision::SelfManaged,
            "a self-managing Application cascades nothing"
        );
        let cascade = app(&all[1..], &[]);
        let removed = stage_finalizers(&cascade, Stage::Cascade(Propagation::Foreground));
        assert_eq!(removed, [RESOURCES_FINALIZER]);
        assert!(later_stages(&cascade, &removed), "PostDelete follows");
        assert!(!later_stages(&app(&all[1..2], &[]), &removed));
    }

    #[test]
    fn guarded_objects_are_left_and_reported() {
        let tracked = |api: &str, kind: &str, ns: &str, name: &str, extra: Value| {
            let key = object::ObjectKey::of(&json!({"apiVersion": api, "kind": kind,
                "metadata": {"name": name, "namespace": ns}}));
            let mut annotations = json!({"capstan.dev/tracking-id": format!("capstan-system/capstan-system:{key}")});
            if let (Some(a), Some(e)) = (annotations.as_object_mut(), extra.as_object()) {
                a.extend(e.clone());
            }
            Arc::new(json!({"apiVersion": api, "kind": kind,
                "metadata": {"name": name, "namespace": ns, "annotations": annotations}}))
        };
        let crd = "apiextensions.k8s.io/v1";
        let capp = "capstan.dev/v1alpha1";
        let live = vec![
            tracked(
                crd,
                "CustomResourceDefinition",
                "",
                "applications.capstan.dev",
                json!({}),
            ),
            tracked(crd, "CustomResourceDefinition", "", "widgets.example.com", json!({})),
            tracked("v1", "Namespace", "", "capstan-system", json!({})),
            tracked(capp, "Application", "capstan-system", "capstan-system", json!({})),
            tracked(
                "v1",
                "ConfigMap",
                "shop",
                "kept",
                json!({"helm.sh/resource-policy": "keep"}),
            ),
            tracked(
                "v1",
                "ConfigMap",
                "shop",
                "stays",
                json!({"capstan.dev/sync-options": "Delete=false"}),
            ),
            tracked("v1", "ConfigMap", "shop", "goes", json!({})),
            tracked(capp, "Application", "capstan-system", "user-app", json!({})),
        ];
        let who = Protection {
            operator_namespace: "capstan-system",
            app_namespace: "capstan-system",
            app_name: "capstan-system",
        };
        let (delete, held) = protect(&who, &live);
        let names: Vec<&str> = delete.iter().map(|o| object::name(o)).collect();
        assert_eq!(names, ["goes", "user-app"]);
        let guards: Vec<&str> = held.iter().map(|m| m.split(' ').nth(1).unwrap_or_default()).collect();
        assert_eq!(
            guards,
            [
                "CapstanCRD",
                "CustomResourceDefinition",
                "OperatorNamespace",
                "SelfApplication",
                "HelmResourcePolicyKeep",
                "DeleteFalse"
            ]
        );
    }

    #[test]
    fn waves_go_in_reverse_order_one_at_a_time() {
        let obj = |kind: &str, name: &str, wave: &str, terminating: bool| {
            let mut o = json!({"apiVersion": "v1", "kind": kind,
                "metadata": {"name": name, "annotations": {"argocd.argoproj.io/sync-wave": wave}}});
            if terminating {
                o["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            o
        };
        let objects = [
            obj("ConfigMap", "config", "0", false),
            obj("Deployment", "web", "1", false),
            obj("Service", "web", "1", false),
            obj("Namespace", "early", "-1", false),
        ];
        let refs: Vec<&Value> = objects.iter().collect();
        let Wave::Delete(first) = next_wave(&refs) else {
            panic!("the highest wave goes first")
        };
        let first: Vec<&str> = first.iter().map(|o| object::kind(o)).collect();
        assert_eq!(first, ["Deployment", "Service"], "wave 1, workloads before Services");
        let terminating = obj("Deployment", "web", "1", true);
        let rest = [&terminating, refs[0], refs[3]];
        assert_eq!(
            next_wave(&rest),
            Wave::Terminating(1),
            "no wave starts while one terminates"
        );
        assert_eq!(next_wave(&[refs[0], refs[3]]), Wave::Delete(vec![refs[0]]));
        assert_eq!(next_wave(&[refs[3]]), Wave::Delete(vec![refs[3]]));
        assert_eq!(next_wave(&[]), Wave::Done);
    }

    #[test]
    fn propagation_follows_the_finalizers() {
        let f = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(propagation(&f(&[RESOURCES_FINALIZER])), Propagation::Foreground);
        assert_eq!(propagation(&f(&[ARGO_FINALIZER_BACKGROUND])), Propagation::Background);
        assert_eq!(
            propagation(&f(&[RESOURCES_FINALIZER_BACKGROUND])),
            Propagation::Background
        );
        assert_eq!(
            propagation(&f(&[RESOURCES_FINALIZER_BACKGROUND, ARGO_FINALIZER])),
            Propagation::Foreground
        );
    }
}
