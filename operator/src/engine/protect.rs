//! Self-protection: the objects an Application must never remove, whatever Git says.
//!
//! A self-managing installation (`capstan bootstrap`) puts the operator's own CRDs, namespace,
//! Deployment and the Application that manages them under that very Application. Removing a file
//! from Git, or deleting the Application with a cascade finalizer, must not turn into suicide:
//! deleting a `capstan.dev` CRD deletes every Application of the cluster with it, deleting the
//! operator's namespace or its own Deployment stops the operator half-way through, and an
//! Application deleting itself wedges its own finalizers. These rules are enforced here, in the engine, not by annotations in
//! Git (an annotation is one careless commit away from gone).
//!
//! One pure function, [`guard`], decides for one live object and one kind of removal whether a
//! guard holds it. The sync planner asks before every prune, the cascade deletion before every
//! delete, and the comparison leaves the Application itself out of its own health. A held object
//! is left in place; the caller reports the guard's [`Guard::name`] in a condition and an Event.
//!
//! One more rule guards an upgrade rather than a removal: a sync whose CRD drops a version still
//! listed in the live CRD's `status.storedVersions` is refused as a whole before anything is written
//! ([`stored_versions_refusal`], reason [`REASON_STORED_VERSION_REMOVED`]).

use serde_json::Value;

use super::object;
use super::plan::options::PruneOption;

/// The group whose CRDs no Application may ever delete.
pub const CAPSTAN_GROUP: &str = "capstan.dev";
/// Helm's annotation that keeps a resource when its release goes.
pub const HELM_RESOURCE_POLICY: &str = "helm.sh/resource-policy";

/// How an object would leave the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// A sync prunes it: it is no longer in Git. `prune` is the object's effective `Prune=` option.
    Prune(PruneOption),
    /// The Application is deleted with a cascade finalizer.
    Cascade,
}

/// A guard that held an object back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// A CustomResourceDefinition: never cascade-deleted; pruned only with `Prune=confirm`.
    Crd,
    /// A CRD of `capstan.dev`: never deleted by any Application.
    CapstanCrd,
    /// The operator's own namespace.
    OperatorNamespace,
    /// The operator's own Deployment (in its namespace, labelled `app.kubernetes.io/name: capstan`
    /// as `config/` and the Helm chart label it): pruning it would stop the operator mid-sync.
    OperatorWorkload,
    /// The Application itself (the self-managing Application lists itself).
    SelfApplication,
    /// `Delete=false` in the object's sync options (cascade only).
    DeleteFalse,
    /// `helm.sh/resource-policy: keep` (cascade only).
    HelmKeep,
}

impl Guard {
    /// The stable name reported in conditions, events and operation results.
    pub fn name(self) -> &'static str {
        match self {
            Guard::Crd => "CustomResourceDefinition",
            Guard::CapstanCrd => "CapstanCRD",
            Guard::OperatorNamespace => "OperatorNamespace",
            Guard::OperatorWorkload => "OperatorWorkload",
            Guard::SelfApplication => "SelfApplication",
            Guard::DeleteFalse => "DeleteFalse",
            Guard::HelmKeep => "HelmResourcePolicyKeep",
        }
    }

    /// Why the guard holds, for a human.
    pub fn reason(self) -> &'static str {
        match self {
            Guard::Crd => {
                "a CustomResourceDefinition is never deleted with its Application and pruned only with Prune=confirm"
            }
            Guard::CapstanCrd => "a capstan.dev CustomResourceDefinition is never deleted by an Application",
            Guard::OperatorNamespace => "the operator's own namespace is never deleted by an Application",
            Guard::OperatorWorkload => "the operator's own Deployment is never deleted by an Application",
            Guard::SelfApplication => "an Application never deletes itself",
            Guard::DeleteFalse => "the object's sync options say Delete=false",
            Guard::HelmKeep => "the object is annotated helm.sh/resource-policy: keep",
        }
    }

    /// One line for a condition or an event about `obj`.
    pub fn message(self, obj: &Value) -> String {
        let key = object::ObjectKey::of(obj);
        format!("guard {} held {key}: {}", self.name(), self.reason())
    }
}

/// Who is removing: the Application and the operator it runs in.
#[derive(Clone, Copy, Debug)]
pub struct Protection<'a> {
    /// The operator's namespace (`capstan run --namespace`).
    pub operator_namespace: &'a str,
    /// The Application's namespace.
    pub app_namespace: &'a str,
    /// The Application's name.
    pub app_name: &'a str,
}

impl Protection<'_> {
    /// Whether `obj` is this very Application.
    pub fn is_self(&self, obj: &Value) -> bool {
        let (group, _) = object::group_version(obj);
        group == CAPSTAN_GROUP
            && object::kind(obj) == "Application"
            && object::namespace(obj) == self.app_namespace
            && object::name(obj) == self.app_name
    }
}

/// The guard that holds `obj` back from `removal`, if any (see the module doc).
pub fn guard(p: &Protection<'_>, obj: &Value, removal: Removal) -> Option<Guard> {
    let (group, _) = object::group_version(obj);
    let kind = object::kind(obj);
    if group == "apiextensions.k8s.io" && kind == "CustomResourceDefinition" {
        return crd_guard(obj, removal);
    }
    if group.is_empty() && kind == "Namespace" && object::name(obj) == p.operator_namespace {
        return Some(Guard::OperatorNamespace);
    }
    if p.is_self(obj) {
        return Some(Guard::SelfApplication);
    }
    if is_operator_workload(p, obj) {
        return Some(Guard::OperatorWorkload);
    }
    if removal == Removal::Cascade {
        return cascade_opt_out(obj);
    }
    None
}

/// The label `config/` and the Helm chart put on the operator's Deployment.
pub const OPERATOR_NAME_LABEL: (&str, &str) = ("app.kubernetes.io/name", "capstan");

fn is_operator_workload(p: &Protection<'_>, obj: &Value) -> bool {
    let (group, _) = object::group_version(obj);
    let (label, value) = OPERATOR_NAME_LABEL;
    group == "apps"
        && object::kind(obj) == "Deployment"
        && object::namespace(obj) == p.operator_namespace
        && obj
            .pointer("/metadata/labels")
            .and_then(|l| l.get(label))
            .and_then(Value::as_str)
            == Some(value)
}

fn crd_guard(obj: &Value, removal: Removal) -> Option<Guard> {
    let name = object::name(obj);
    let spec_group = obj.pointer("/spec/group").and_then(Value::as_str).unwrap_or_default();
    if spec_group == CAPSTAN_GROUP || name.ends_with(".capstan.dev") {
        return Some(Guard::CapstanCrd);
    }
    match removal {
        Removal::Prune(PruneOption::Confirm) => None,
        _ => Some(Guard::Crd),
    }
}

/// `Delete=false` (Argo CD's sync option) and Helm's `keep` resource policy.
fn cascade_opt_out(obj: &Value) -> Option<Guard> {
    let options = object::sync_options(obj);
    if object::option(&options, "Delete").is_some_and(|v| v.trim().eq_ignore_ascii_case("false")) {
        return Some(Guard::DeleteFalse);
    }
    let keep = object::annotation(obj, HELM_RESOURCE_POLICY)
        .is_some_and(|v| v.split(',').any(|p| p.trim().eq_ignore_ascii_case("keep")));
    keep.then_some(Guard::HelmKeep)
}

/// The condition reason of a sync refused because a CRD drops a stored version.
pub const REASON_STORED_VERSION_REMOVED: &str = "StoredVersionRemoved";

/// The versions the live CRD's `status.storedVersions` lists that the `desired` CRD no longer has in
/// `spec.versions`. Objects of such a version still sit in etcd; the API server refuses the update
/// anyway, and a cluster that took it would leave those objects unreadable. The way out is the
/// documented migration: rewrite the stored objects, then remove the version from `storedVersions`.
pub fn dropped_stored_versions(desired: &Value, live: &Value) -> Vec<String> {
    let versions: Vec<&str> = desired
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter_map(|v| v.get("name").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    live.pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .map(|stored| {
            stored
                .iter()
                .filter_map(Value::as_str)
                .filter(|v| !versions.contains(v))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The refusal of a sync whose desired CRDs (paired with their live objects) drop a stored version:
/// one sentence naming every such CRD and version, or `None` when the sync may go on.
pub fn stored_versions_refusal<'v>(pairs: impl IntoIterator<Item = (&'v Value, &'v Value)>) -> Option<String> {
    let dropped: Vec<String> = pairs
        .into_iter()
        .filter_map(|(desired, live)| {
            let versions = dropped_stored_versions(desired, live);
            (!versions.is_empty()).then(|| {
                format!(
                    "CustomResourceDefinition {} drops version(s) {} still listed in status.storedVersions",
                    object::name(desired),
                    versions.join(", ")
                )
            })
        })
        .collect();
    (!dropped.is_empty()).then(|| {
        format!(
            "{}: nothing of this sync was applied; migrate the stored objects to a served version and remove \
             the old one from status.storedVersions first",
            dropped.join("; ")
        )
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    const P: Protection<'static> = Protection {
        operator_namespace: "capstan-system",
        app_namespace: "capstan-system",
        app_name: "capstan-system",
    };

    fn crd(name: &str, group: &str) -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": name}, "spec": {"group": group}})
    }

    fn cm(annotations: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "c", "namespace": "shop", "annotations": annotations}})
    }

    const PRUNE: Removal = Removal::Prune(PruneOption::Enabled);
    const CONFIRMED: Removal = Removal::Prune(PruneOption::Confirm);

    #[test]
    fn crds_are_never_cascaded_and_pruned_only_with_confirm() {
        let widgets = crd("widgets.example.com", "example.com");
        assert_eq!(guard(&P, &widgets, Removal::Cascade), Some(Guard::Crd));
        assert_eq!(guard(&P, &widgets, PRUNE), Some(Guard::Crd));
        assert_eq!(guard(&P, &widgets, CONFIRMED), None);
    }

    #[test]
    fn capstan_crds_are_never_deleted() {
        let apps = crd("applications.capstan.dev", "capstan.dev");
        for removal in [Removal::Cascade, PRUNE, CONFIRMED] {
            assert_eq!(guard(&P, &apps, removal), Some(Guard::CapstanCrd));
        }
    }

    #[test]
    fn the_operator_namespace_is_never_deleted() {
        let ns = |n: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}});
        for removal in [Removal::Cascade, PRUNE, CONFIRMED] {
            assert_eq!(
                guard(&P, &ns("capstan-system"), removal),
                Some(Guard::OperatorNamespace)
            );
            assert_eq!(guard(&P, &ns("shop"), removal), None);
        }
    }

    #[test]
    fn the_operator_deployment_is_never_deleted() {
        let deployment = |ns: &str, labels: Value| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "capstan", "namespace": ns, "labels": labels}})
        };
        let own = deployment("capstan-system", json!({"app.kubernetes.io/name": "capstan"}));
        for removal in [Removal::Cascade, PRUNE, CONFIRMED] {
            assert_eq!(guard(&P, &own, removal), Some(Guard::OperatorWorkload));
        }
        let elsewhere = deployment("shop", json!({"app.kubernetes.io/name": "capstan"}));
        assert_eq!(guard(&P, &elsewhere, PRUNE), None);
        let other = deployment("capstan-system", json!({"app.kubernetes.io/name": "web"}));
        assert_eq!(guard(&P, &other, Removal::Cascade), None);
    }

    #[test]
    fn an_application_never_removes_itself() {
        let app = |ns: &str, name: &str| {
            json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
                   "metadata": {"name": name, "namespace": ns}})
        };
        assert_eq!(
            guard(&P, &app("capstan-system", "capstan-system"), PRUNE),
            Some(Guard::SelfApplication)
        );
        assert_eq!(
            guard(&P, &app("capstan-system", "capstan-system"), Removal::Cascade),
            Some(Guard::SelfApplication)
        );
        assert_eq!(guard(&P, &app("capstan-system", "shop"), Removal::Cascade), None);
        assert_eq!(guard(&P, &app("shop", "capstan-system"), PRUNE), None);
    }

    #[test]
    fn cascade_honours_delete_false_and_helm_keep() {
        let delete_false = cm(json!({"argocd.argoproj.io/sync-options": "Prune=true,Delete=false"}));
        assert_eq!(guard(&P, &delete_false, Removal::Cascade), Some(Guard::DeleteFalse));
        assert_eq!(
            guard(&P, &delete_false, PRUNE),
            None,
            "Delete=false is about cascade deletion only"
        );
        let keep = cm(json!({"helm.sh/resource-policy": "keep"}));
        assert_eq!(guard(&P, &keep, Removal::Cascade), Some(Guard::HelmKeep));
        assert_eq!(guard(&P, &cm(json!({})), Removal::Cascade), None);
    }

    #[test]
    fn the_message_names_the_guard_and_the_object() {
        let m = Guard::CapstanCrd.message(&crd("applications.capstan.dev", "capstan.dev"));
        assert!(m.starts_with("guard CapstanCRD held "), "{m}");
        assert!(m.contains("applications.capstan.dev"), "{m}");
    }

    #[test]
    fn a_crd_may_not_drop_a_stored_version() {
        let versions = |names: &[&str]| -> Value {
            names
                .iter()
                .map(|n| json!({"name": n, "served": true, "storage": *n == names[0]}))
                .collect()
        };
        let desired = |names: &[&str]| {
            let mut c = crd("widgets.example.com", "example.com");
            c["spec"]["versions"] = versions(names);
            c
        };
        let live = |stored: &[&str]| {
            let mut c = desired(&["v1"]);
            c["status"] = json!({"storedVersions": stored});
            c
        };
        // (desired versions, live storedVersions, dropped)
        let table: [(&[&str], &[&str], &[&str]); 6] = [
            (&["v1"], &["v1"], &[]),
            (&["v2", "v1"], &["v1"], &[]),
            (&["v2"], &["v1"], &["v1"]),
            (&["v2"], &["v1", "v2"], &["v1"]),
            (&["v3"], &["v1", "v2"], &["v1", "v2"]),
            (&["v2"], &[], &[]),
        ];
        for (wanted, stored, dropped) in table {
            assert_eq!(
                dropped_stored_versions(&desired(wanted), &live(stored)),
                dropped,
                "{wanted:?} over {stored:?}"
            );
        }
        assert_eq!(
            dropped_stored_versions(&desired(&["v2"]), &desired(&["v1"])),
            Vec::<String>::new(),
            "no status"
        );
        let (bad, good) = ((desired(&["v2"]), live(&["v1"])), (desired(&["v1"]), live(&["v1"])));
        assert_eq!(stored_versions_refusal([(&good.0, &good.1)]), None);
        let refusal = stored_versions_refusal([(&good.0, &good.1), (&bad.0, &bad.1)]).expect("refused");
        assert!(
            refusal.starts_with("CustomResourceDefinition widgets.example.com drops version(s) v1 "),
            "{refusal}"
        );
        assert!(refusal.contains("nothing of this sync was applied"), "{refusal}");
    }
}
