//! `capstan uninstall`: remove Capstan from a cluster and leave what its Applications deployed.
//!
//! The order matters (a namespace deleted first wedges on finalizers no controller will handle, or a
//! controller that comes back finds its Applications deleting and cascades):
//! 1. **stop** the Applications bootstrap made (`capstan-system`, `capstan-apps`): their automated
//!    sync with self-heal would re-create the operator while it is being removed;
//! 2. **strip Capstan's finalizers** (cascade and deletion hooks) from every Application, so deleting
//!    them later orphans their workloads instead of deleting them;
//! 3. **delete the operator**: its Deployment first (nothing reconciles any more), then its RBAC,
//!    ServiceAccount and the rest of the components, and the Git credentials Secret;
//! 4. **delete every Capstan custom resource**, each stripped of any finalizer left (nothing runs to
//!    handle one now);
//! 5. **delete the CRDs** (unless `--keep-crds`), then 6. **the namespace** (unless `--keep-namespace`).
//!
//! Each phase waits until what it deleted is gone before the next starts, within `--timeout`.
//! Git is left alone: the command prints the folder to remove. The plan ([`plan`]) is pure; `--dry-run`
//! prints it after only reading the cluster.

use std::fmt;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::{json, Value};

use super::tree::{APPS_APP, GIT_SECRET, SELF_APP};
use super::BootstrapError;
use crate::cluster::ops::{self, DeleteOptions, Propagation};
use crate::cluster::{ClusterError, ClusterHandle};
use crate::engine::object;

/// The flags of `capstan uninstall`.
#[derive(Clone, Debug)]
pub struct UninstallOptions {
    /// `--namespace`: the operator's namespace.
    pub namespace: String,
    /// `--keep-namespace`.
    pub keep_namespace: bool,
    /// `--keep-crds`.
    pub keep_crds: bool,
    /// `--timeout`: the bound on every wait together.
    pub timeout: Duration,
}

/// One object the plan acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ref {
    /// Its group, version and kind.
    pub gvk: GroupVersionKind,
    /// Its namespace (empty for a cluster-scoped object).
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl Ref {
    fn of(obj: &Value) -> Ref {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        Ref {
            gvk: GroupVersionKind::gvk(group, version, object::kind(obj)),
            namespace: object::namespace(obj).to_string(),
            name: object::name(obj).to_string(),
        }
    }
}

impl fmt::Display for Ref {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.gvk.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.gvk.kind, self.namespace, self.name)
        }
    }
}

/// One action of the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Turn off an Application's automated sync.
    Stop(Ref),
    /// Set an object's finalizers from the first list (as read) to the second.
    Unfinalize(Ref, Vec<String>, Vec<String>),
    /// Delete an object (the phase then waits until it is gone).
    Delete(Ref),
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Stop(r) => write!(f, "stop automated sync of {r}"),
            Step::Unfinalize(r, from, to) => {
                let removed: Vec<&str> = from.iter().filter(|x| !to.contains(x)).map(String::as_str).collect();
                write!(f, "remove finalizers {} from {r}", removed.join(", "))
            }
            Step::Delete(r) => write!(f, "delete {r}"),
        }
    }
}

/// A named group of steps; its deletions are waited for before the next phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phase {
    /// What the phase does, for the printed plan.
    pub title: &'static str,
    /// Its steps, in order.
    pub steps: Vec<Step>,
}

/// Whether Capstan (or an Argo CD-compatible finalizer Capstan honours) put `finalizer` there.
pub fn is_capstan_finalizer(finalizer: &str) -> bool {
    finalizer.starts_with("capstan.dev/") || finalizer.contains("argocd.argoproj.io")
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|f| f.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// The uninstall plan: `components` are the installation's objects (as bootstrap renders them),
/// `resources` every live Capstan custom resource (Applications included).
pub fn plan(components: &[Value], resources: &[Value], opts: &UninstallOptions) -> Vec<Phase> {
    let is = |o: &Value, kind: &str| object::kind(o) == kind;
    let apps: Vec<&Value> = resources.iter().filter(|o| is(o, "Application")).collect();
    let ours = |o: &&&Value| object::namespace(o) == opts.namespace && [SELF_APP, APPS_APP].contains(&object::name(o));
    let stop = apps.iter().filter(ours).map(|a| Step::Stop(Ref::of(a))).collect();
    let unfinalize = apps
        .iter()
        .filter_map(|a| {
            let from = finalizers(a);
            let to: Vec<String> = from.iter().filter(|f| !is_capstan_finalizer(f)).cloned().collect();
            (to.len() != from.len()).then(|| Step::Unfinalize(Ref::of(a), from, to))
        })
        .collect();
    let foundation = |o: &Value| is(o, "Namespace") || is(o, "CustomResourceDefinition");
    let mut operator: Vec<&Value> = components.iter().filter(|o| !foundation(o)).collect();
    // The Deployment first: once it is gone nothing reconciles; then the rest, last applied first.
    operator.sort_by_key(|o| !is(o, "Deployment"));
    let after_deployment = 1.min(operator.len());
    operator[after_deployment..].reverse();
    let mut delete_operator: Vec<Step> = operator.iter().map(|o| Step::Delete(Ref::of(o))).collect();
    delete_operator.push(Step::Delete(Ref::of(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"namespace": opts.namespace, "name": GIT_SECRET}}))));
    let mut delete_resources = Vec::new();
    for r in resources {
        let from = finalizers(r);
        if !from.is_empty() {
            delete_resources.push(Step::Unfinalize(Ref::of(r), from, Vec::new()));
        }
        delete_resources.push(Step::Delete(Ref::of(r)));
    }
    let delete_kind = |kind: &str| {
        components
            .iter()
            .filter(|o| is(o, kind))
            .map(|o| Step::Delete(Ref::of(o)))
            .collect()
    };
    let mut phases = vec![
        Phase {
            title: "stop the Applications bootstrap made",
            steps: stop,
        },
        Phase {
            title: "strip Capstan's finalizers from Applications (their workloads stay)",
            steps: unfinalize,
        },
        Phase {
            title: "delete the operator",
            steps: delete_operator,
        },
        Phase {
            title: "delete Capstan's custom resources",
            steps: delete_resources,
        },
    ];
    if !opts.keep_crds {
        phases.push(Phase {
            title: "delete the CRDs",
            steps: delete_kind("CustomResourceDefinition"),
        });
    }
    if !opts.keep_namespace {
        phases.push(Phase {
            title: "delete the namespace",
            steps: delete_kind("Namespace"),
        });
    }
    phases
}

/// The group/version/kind of each Capstan CRD among `components` (the version served and stored).
pub fn custom_kinds(components: &[Value]) -> Vec<GroupVersionKind> {
    components
        .iter()
        .filter(|o| object::kind(o) == "CustomResourceDefinition")
        .filter_map(|crd| {
            let group = crd.pointer("/spec/group")?.as_str()?;
            let kind = crd.pointer("/spec/names/kind")?.as_str()?;
            let versions = crd.pointer("/spec/versions")?.as_array()?;
            let version = versions.iter().find(|v| v["storage"] == true).or(versions.first())?;
            Some(GroupVersionKind::gvk(group, version["name"].as_str()?, kind))
        })
        .collect()
}

/// Every live object of `kinds` in all namespaces (a kind the cluster does not serve has none).
pub async fn list_resources(cluster: &ClusterHandle, kinds: &[GroupVersionKind]) -> Result<Vec<Value>, BootstrapError> {
    let mut out = Vec::new();
    for gvk in kinds {
        let resolved = match cluster.discovery().resolve(gvk).await {
            Ok(r) => r,
            Err(ClusterError::UnknownKind(_) | ClusterError::NotFound(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        let api: Api<DynamicObject> = Api::all_with(cluster.client().clone(), &resolved.resource);
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| BootstrapError::Cluster(ClusterError::from_kube(e, &format!("list {}", gvk.kind), false)))?;
        for item in list.items {
            let mut v = serde_json::to_value(item).map_err(|e| BootstrapError::Invalid(format!("{e}")))?;
            v["apiVersion"] = json!(resolved.resource.api_version);
            v["kind"] = json!(gvk.kind);
            out.push(v);
        }
    }
    Ok(out)
}

/// Runs `phases` in order, printing each step with `say`.
pub async fn execute(
    cluster: &ClusterHandle,
    phases: &[Phase],
    timeout: Duration,
    say: &mut dyn FnMut(&str),
) -> Result<(), BootstrapError> {
    let deadline = Instant::now() + timeout;
    for (i, phase) in phases.iter().enumerate() {
        say(&format!("{}. {}", i + 1, phase.title));
        let mut deleted = Vec::new();
        for step in &phase.steps {
            say(&format!("   {step}"));
            run_step(cluster, step).await?;
            if let Step::Delete(r) = step {
                deleted.push(r);
            }
        }
        for r in deleted {
            wait_gone(cluster, r, deadline).await?;
        }
    }
    Ok(())
}

async fn api_for(cluster: &ClusterHandle, r: &Ref) -> Result<Api<DynamicObject>, ClusterError> {
    let resolved = cluster.discovery().resolve(&r.gvk).await?;
    let client = cluster.client().clone();
    Ok(if resolved.namespaced {
        Api::namespaced_with(client, &r.namespace, &resolved.resource)
    } else {
        Api::all_with(client, &resolved.resource)
    })
}

fn wrap(r: &Ref) -> impl Fn(kube::Error) -> BootstrapError + '_ {
    move |e| BootstrapError::Cluster(ClusterError::from_kube(e, &r.to_string(), false))
}

async fn run_step(cluster: &ClusterHandle, step: &Step) -> Result<(), BootstrapError> {
    match step {
        Step::Stop(r) => {
            let patch = json!({"spec": {"syncPolicy": {"automated": null}}});
            let api = api_for(cluster, r).await?;
            ignore_missing(api.patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch)).await).map_err(wrap(r))
        }
        Step::Unfinalize(r, from, to) => {
            let patch = json!([{"op": "test", "path": "/metadata/finalizers", "value": from},
                               {"op": "replace", "path": "/metadata/finalizers", "value": to}]);
            let patch: json_patch::Patch =
                serde_json::from_value(patch).map_err(|e| BootstrapError::Invalid(e.to_string()))?;
            let api = api_for(cluster, r).await?;
            match api
                .patch(&r.name, &PatchParams::default(), &Patch::<()>::Json(patch))
                .await
            {
                // The finalizers changed since they were read (the operator was still running): read and strip again.
                Err(kube::Error::Api(e)) if e.code == 422 || e.code == 409 => {
                    restrip(&api, r, from, to).await.map_err(wrap(r))
                }
                other => ignore_missing(other).map_err(wrap(r)),
            }
        }
        Step::Delete(r) => {
            let opts = DeleteOptions {
                propagation: Propagation::Background,
                ..DeleteOptions::default()
            };
            match ops::delete(cluster, &r.gvk, &r.namespace, &r.name, &opts).await {
                Ok(_) | Err(ClusterError::UnknownKind(_)) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
    }
}

/// The finalizers to keep of `live` for a step that meant to go `from` → `to`: Capstan's go, and so
/// does every other one the step dropped; one added meanwhile by someone else stays.
fn kept_after(live: Vec<String>, from: &[String], to: &[String]) -> Vec<String> {
    live.into_iter()
        .filter(|f| !is_capstan_finalizer(f) && (to.contains(f) || !from.contains(f)))
        .collect()
}

/// Redoes an [`Step::Unfinalize`] on the object as it is now (see [`kept_after`]).
async fn restrip(api: &Api<DynamicObject>, r: &Ref, from: &[String], to: &[String]) -> Result<(), kube::Error> {
    let Some(live) = api.get_opt(&r.name).await? else {
        return Ok(());
    };
    let kept = kept_after(live.metadata.finalizers.unwrap_or_default(), from, to);
    let patch = json!({"metadata": {"finalizers": kept}});
    ignore_missing(api.patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch)).await)
}

fn ignore_missing<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

async fn wait_gone(cluster: &ClusterHandle, r: &Ref, deadline: Instant) -> Result<(), BootstrapError> {
    loop {
        match ops::get(cluster, &r.gvk, &r.namespace, &r.name).await {
            Ok(None) | Err(ClusterError::UnknownKind(_) | ClusterError::NotFound(_)) => return Ok(()),
            Ok(Some(live)) if Instant::now() >= deadline => {
                let holders = finalizers(&live).join(", ");
                return Err(BootstrapError::Timeout(format!(
                    "{r} is still there (finalizers: [{holders}])"
                )));
            }
            Ok(Some(_)) => tokio::time::sleep(Duration::from_millis(250)).await,
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::components;

    fn opts() -> UninstallOptions {
        UninstallOptions {
            namespace: "capstan-system".into(),
            keep_namespace: false,
            keep_crds: false,
            timeout: Duration::from_secs(1),
        }
    }

    fn app(ns: &str, name: &str, finalizers: &[&str]) -> Value {
        json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
               "metadata": {"namespace": ns, "name": name, "finalizers": finalizers}})
    }

    #[test]
    fn the_plan_stops_strips_then_deletes_operator_resources_crds_and_namespace_in_that_order() {
        let components = components::render(None, &Default::default()).expect("renders");
        let resources = vec![
            app("capstan-system", SELF_APP, &[]),
            app("team", "web", &["capstan.dev/resources", "example.com/keep"]),
        ];
        let phases = plan(&components, &resources, &opts());
        let titles: Vec<&str> = phases.iter().map(|p| p.title).collect();
        assert_eq!(titles.len(), 6, "{titles:?}");
        assert_eq!(phases[0].steps, [Step::Stop(Ref::of(&resources[0]))]);
        assert_eq!(
            phases[1].steps,
            [Step::Unfinalize(
                Ref::of(&resources[1]),
                vec!["capstan.dev/resources".into(), "example.com/keep".into()],
                vec!["example.com/keep".into()]
            )]
        );
        let first = &phases[2].steps[0];
        assert!(
            matches!(first, Step::Delete(r) if r.gvk.kind == "Deployment"),
            "{first}"
        );
        let kinds = |p: &Phase| -> Vec<String> {
            p.steps
                .iter()
                .filter_map(|s| match s {
                    Step::Delete(r) => Some(r.gvk.kind.clone()),
                    _ => None,
                })
                .collect()
        };
        assert!(!kinds(&phases[2])
            .iter()
            .any(|k| k == "CustomResourceDefinition" || k == "Namespace"));
        assert!(kinds(&phases[2]).contains(&"ClusterRole".to_string()));
        assert_eq!(kinds(&phases[3]), ["Application", "Application"]);
        assert!(kinds(&phases[4]).iter().all(|k| k == "CustomResourceDefinition"));
        assert_eq!(kinds(&phases[4]).len(), custom_kinds(&components).len());
        assert_eq!(kinds(&phases[5]), ["Namespace"]);
    }

    #[test]
    fn a_redone_strip_drops_capstans_and_the_dropped_finalizers_and_keeps_new_foreign_ones() {
        let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let live = v(&["capstan.dev/pre-delete-hooks", "example.com/a", "example.com/new"]);
        let from = v(&["capstan.dev/resources", "example.com/a"]);
        assert_eq!(
            kept_after(live.clone(), &from, &v(&["example.com/a"])),
            v(&["example.com/a", "example.com/new"])
        );
        assert_eq!(kept_after(live, &from, &[]), v(&["example.com/new"]));
    }

    #[test]
    fn keep_flags_drop_their_phases() {
        let components = components::render(None, &Default::default()).expect("renders");
        let keep = UninstallOptions {
            keep_crds: true,
            keep_namespace: true,
            ..opts()
        };
        let phases = plan(&components, &[], &keep);
        assert_eq!(phases.len(), 4);
        assert!(phases[0].steps.is_empty() && phases[1].steps.is_empty() && phases[3].steps.is_empty());
    }

    #[test]
    fn the_custom_kinds_are_capstans_five() {
        let components = components::render(None, &Default::default()).expect("renders");
        let mut kinds: Vec<String> = custom_kinds(&components)
            .into_iter()
            .map(|g| format!("{}/{}", g.group, g.kind))
            .collect();
        kinds.sort();
        assert_eq!(
            kinds,
            [
                "capstan.dev/Application",
                "capstan.dev/ApplicationSet",
                "capstan.dev/Cluster",
                "capstan.dev/PolicySet",
                "capstan.dev/Repository"
            ]
        );
    }
}
