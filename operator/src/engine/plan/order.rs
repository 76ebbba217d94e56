//! The order of a sync, stated in one place (gitops-engine `sync_tasks.go` `Less`, `Sort`, `adjustDeps`, and the
//! prune-wave remap of `sync_context.go` `getSyncTasks`):
//!
//! 1. prune tasks get mirrored waves (higher-wave resources are deleted first);
//! 2. with `PruneLast`, prune tasks move to the last Sync-phase wave + 1;
//! 3. tasks sort by phase (PreSync, Sync, PostSync, SyncFail), wave, kind (Helm's kind order, unknown kinds last),
//!    name;
//! 4. a Namespace task moves in front of the first task in that namespace, and a CRD task in front of the first
//!    custom resource of its group/kind, each taking that task's phase and wave.
//!
//! Pure: no I/O.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::tasks::SyncTask;
use crate::api::application::SyncPhase;
use crate::engine::object;

/// The kind order of Helm's kind sorter, as gitops-engine uses it (`sync_tasks.go` `kindOrder`). Kinds not listed
/// (custom resources) sort after all of these.
pub const KIND_ORDER: [&str; 35] = [
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
];

/// Phase order: PreSync=-1, Sync=0, PostSync=1, SyncFail=2 (`syncPhaseOrder`).
pub fn phase_order(phase: SyncPhase) -> i8 {
    match phase {
        SyncPhase::PreSync => -1,
        SyncPhase::Sync => 0,
        SyncPhase::PostSync => 1,
        SyncPhase::SyncFail => 2,
    }
}

/// Rank of a kind: negative for the listed kinds, 0 (last) for anything else — Argo's trick of
/// `kindOrder[kind] = i - len(kinds)`.
pub fn kind_rank(kind: &str) -> i64 {
    match KIND_ORDER.iter().position(|k| *k == kind) {
        Some(i) => i as i64 - KIND_ORDER.len() as i64,
        None => 0,
    }
}

/// `Less` of `sync_tasks.go`: phase, wave, kind, name. Ties (which Go's unstable sort leaves arbitrary) are
/// broken by namespace, group, kind and prune-ness so the order is deterministic.
pub fn compare(a: &SyncTask, b: &SyncTask) -> Ordering {
    phase_order(a.phase)
        .cmp(&phase_order(b.phase))
        .then(a.wave.cmp(&b.wave))
        .then(kind_rank(&a.key.kind).cmp(&kind_rank(&b.key.kind)))
        .then(a.key.name.cmp(&b.key.name))
        .then(a.key.namespace.cmp(&b.key.namespace))
        .then(a.key.group.cmp(&b.key.group))
        .then(a.key.kind.cmp(&b.key.kind))
        .then(a.is_prune().cmp(&b.is_prune()))
}

/// Mirror the waves of prune tasks: sort the distinct prune waves and swap the first with the last, the second
/// with the second-to-last, and so on, so resources created last are deleted first.
pub fn mirror_prune_waves(tasks: &mut [SyncTask]) {
    let waves: Vec<i64> = tasks
        .iter()
        .filter(|t| t.is_prune())
        .map(|t| t.wave)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mirrored: BTreeMap<i64, i64> = waves.iter().zip(waves.iter().rev()).map(|(a, b)| (*a, *b)).collect();
    for t in tasks.iter_mut().filter(|t| t.is_prune()) {
        if let Some(w) = mirrored.get(&t.wave) {
            t.wave = *w;
        }
    }
}

/// `PruneLast` (app-level, or the live object's annotation): the prune task moves to
/// `max(0, last Sync-phase wave) + 1`, computed after mirroring and counting prune tasks too.
pub fn apply_prune_last(tasks: &mut [SyncTask], app_prune_last: bool) {
    let last = tasks
        .iter()
        .filter(|t| t.phase == SyncPhase::Sync)
        .map(|t| t.wave)
        .fold(0, i64::max)
        .saturating_add(1);
    for t in tasks.iter_mut().filter(|t| t.is_prune()) {
        if app_prune_last || t.options.prune_last {
            t.wave = last;
        }
    }
}

/// Sort, then bubble Namespaces and CRDs in front of their first dependent (`syncTasks.Sort`).
pub fn sort_tasks(tasks: &mut [SyncTask]) {
    tasks.sort_by(compare);
    adjust_deps(tasks, namespace_dep, namespace_ref);
    adjust_deps(tasks, crd_dep, cr_ref);
}

/// Everything in order: mirrored prune waves, `PruneLast`, sort and bubbling.
pub fn arrange(tasks: &mut [SyncTask], app_prune_last: bool) {
    mirror_prune_waves(tasks);
    apply_prune_last(tasks, app_prune_last);
    sort_tasks(tasks);
}

fn namespace_dep(obj: &Value) -> Option<String> {
    let (group, _) = object::group_version(obj);
    (group.is_empty() && object::kind(obj) == "Namespace").then(|| object::name(obj).to_string())
}

fn namespace_ref(obj: &Value) -> Option<String> {
    let ns = object::namespace(obj);
    (!ns.is_empty()).then(|| ns.to_string())
}

/// `group/kind` defined by a CRD (`spec.group`, `spec.names.kind`).
pub fn crd_group_kind(obj: &Value) -> Option<String> {
    if !is_crd(obj) {
        return None;
    }
    let group = obj.pointer("/spec/group").and_then(Value::as_str)?;
    let kind = obj.pointer("/spec/names/kind").and_then(Value::as_str)?;
    Some(format!("{group}/{kind}"))
}

/// Whether `obj` is a CustomResourceDefinition.
pub fn is_crd(obj: &Value) -> bool {
    let (group, _) = object::group_version(obj);
    group == "apiextensions.k8s.io" && object::kind(obj) == "CustomResourceDefinition"
}

fn crd_dep(obj: &Value) -> Option<String> {
    crd_group_kind(obj)
}

fn cr_ref(obj: &Value) -> Option<String> {
    let (group, _) = object::group_version(obj);
    Some(format!("{group}/{}", object::kind(obj)))
}

/// `adjustDeps`: a task that is a dependency (`is_dep`) and comes after the first task referring to it
/// (`refers`) moves in front of that task and takes its wave and phase. Only tasks with a target take part.
fn adjust_deps(tasks: &mut [SyncTask], is_dep: fn(&Value) -> Option<String>, refers: fn(&Value) -> Option<String>) {
    let mut first_ref: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..tasks.len() {
        let Some(target) = tasks[i].target.as_ref() else {
            continue;
        };
        if let Some(dep) = is_dep(target) {
            let Some(&index) = first_ref.get(&dep) else {
                continue;
            };
            let (wave, phase) = (tasks[index].wave, tasks[index].phase);
            tasks[i].wave = wave;
            tasks[i].phase = phase;
            tasks[index..=i].rotate_right(1);
            for idx in first_ref.values_mut() {
                if *idx >= index {
                    *idx += 1;
                }
            }
        } else if let Some(r) = refers(target) {
            first_ref.entry(r).or_insert(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::engine::plan::tasks::SyncTask;

    fn obj(api: &str, kind: &str, ns: &str, name: &str, wave: i64) -> Value {
        json!({"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": ns,
            "annotations": {"argocd.argoproj.io/sync-wave": wave.to_string()}}})
    }

    fn names(tasks: &[SyncTask]) -> Vec<String> {
        tasks
            .iter()
            .map(|t| format!("{:?}/{}/{}:{}", t.phase, t.wave, t.key.kind, t.key.name))
            .collect()
    }

    #[test]
    fn kind_order_table() {
        assert!(kind_rank("Namespace") < kind_rank("CustomResourceDefinition"));
        assert!(kind_rank("ConfigMap") < kind_rank("Deployment"));
        assert!(kind_rank("IngressClass") < kind_rank("Ingress"));
        assert!(kind_rank("APIService") < kind_rank("Widget"));
        assert_eq!(kind_rank("Widget"), 0);
    }

    #[test]
    fn sorts_by_phase_wave_kind_name() {
        let mut tasks = vec![
            SyncTask::for_test(obj("apps/v1", "Deployment", "a", "web", 0), SyncPhase::Sync),
            SyncTask::for_test(obj("v1", "ConfigMap", "a", "b", 0), SyncPhase::Sync),
            SyncTask::for_test(obj("v1", "ConfigMap", "a", "a", 0), SyncPhase::Sync),
            SyncTask::for_test(obj("example.com/v1", "Widget", "a", "w", 0), SyncPhase::Sync),
            SyncTask::for_test(obj("batch/v1", "Job", "a", "post", 0), SyncPhase::PostSync),
            SyncTask::for_test(obj("batch/v1", "Job", "a", "pre", 5), SyncPhase::PreSync),
            SyncTask::for_test(obj("v1", "Service", "a", "svc", -1), SyncPhase::Sync),
            SyncTask::for_test(obj("batch/v1", "Job", "a", "fail", -9), SyncPhase::SyncFail),
        ];
        sort_tasks(&mut tasks);
        assert_eq!(
            names(&tasks),
            [
                "PreSync/5/Job:pre",
                "Sync/-1/Service:svc",
                "Sync/0/ConfigMap:a",
                "Sync/0/ConfigMap:b",
                "Sync/0/Deployment:web",
                "Sync/0/Widget:w",
                "PostSync/0/Job:post",
                "SyncFail/-9/Job:fail",
            ]
        );
    }

    #[test]
    fn namespace_and_crd_bubble_into_an_earlier_wave() {
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com", "annotations": {"argocd.argoproj.io/sync-wave": "3"}},
            "spec": {"group": "example.com", "names": {"kind": "Widget"}}});
        let mut tasks = vec![
            SyncTask::for_test(obj("v1", "Namespace", "", "shop", 2), SyncPhase::Sync),
            SyncTask::for_test(obj("v1", "ConfigMap", "shop", "cfg", 1), SyncPhase::Sync),
            SyncTask::for_test(crd, SyncPhase::Sync),
            SyncTask::for_test(obj("example.com/v1", "Widget", "other", "w", -1), SyncPhase::Sync),
            SyncTask::for_test(obj("batch/v1", "Job", "shop", "pre", 0), SyncPhase::PreSync),
        ];
        sort_tasks(&mut tasks);
        assert_eq!(
            names(&tasks),
            [
                "PreSync/0/Namespace:shop",
                "PreSync/0/Job:pre",
                "Sync/-1/CustomResourceDefinition:widgets.example.com",
                "Sync/-1/Widget:w",
                "Sync/1/ConfigMap:cfg",
            ]
        );
    }

    #[test]
    fn dependency_already_first_stays() {
        let mut tasks = vec![
            SyncTask::for_test(obj("v1", "Namespace", "", "shop", -5), SyncPhase::Sync),
            SyncTask::for_test(obj("v1", "ConfigMap", "shop", "cfg", 1), SyncPhase::Sync),
        ];
        sort_tasks(&mut tasks);
        assert_eq!(names(&tasks), ["Sync/-5/Namespace:shop", "Sync/1/ConfigMap:cfg"]);
    }

    #[test]
    fn prune_waves_are_mirrored() {
        let mut tasks: Vec<SyncTask> = [(-1, "a"), (0, "b"), (3, "c"), (7, "d"), (7, "e")]
            .iter()
            .map(|(w, n)| SyncTask::prune_for_test(obj("v1", "ConfigMap", "x", n, *w)))
            .collect();
        tasks.push(SyncTask::for_test(
            obj("v1", "ConfigMap", "x", "keep", 2),
            SyncPhase::Sync,
        ));
        mirror_prune_waves(&mut tasks);
        let waves: Vec<(String, i64)> = tasks.iter().map(|t| (t.key.name.clone(), t.wave)).collect();
        assert_eq!(
            waves,
            [("a", 7), ("b", 3), ("c", 0), ("d", -1), ("e", -1), ("keep", 2)].map(|(n, w)| (n.to_string(), w))
        );
    }

    #[test]
    fn prune_last_moves_prunes_after_the_last_sync_wave() {
        let mut annotated = obj("v1", "ConfigMap", "x", "last", 0);
        annotated["metadata"]["annotations"]["argocd.argoproj.io/sync-options"] = json!("PruneLast=true");
        let mut tasks = vec![
            SyncTask::for_test(obj("v1", "ConfigMap", "x", "app", 4), SyncPhase::Sync),
            SyncTask::prune_for_test(obj("v1", "ConfigMap", "x", "old", 0)),
            SyncTask::prune_for_test(annotated),
            SyncTask::for_test(obj("batch/v1", "Job", "x", "post", 9), SyncPhase::PostSync),
        ];
        arrange(&mut tasks, false);
        assert_eq!(
            names(&tasks),
            [
                "Sync/0/ConfigMap:old",
                "Sync/4/ConfigMap:app",
                "Sync/5/ConfigMap:last",
                "PostSync/9/Job:post"
            ]
        );
        let mut all = vec![
            SyncTask::for_test(obj("v1", "ConfigMap", "x", "app", -3), SyncPhase::Sync),
            SyncTask::prune_for_test(obj("v1", "ConfigMap", "x", "old", -7)),
        ];
        arrange(&mut all, true);
        assert_eq!(names(&all), ["Sync/-3/ConfigMap:app", "Sync/1/ConfigMap:old"]);
    }
}
