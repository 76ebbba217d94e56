//! Bootstrap's requests to the cluster: server-side apply as `capstan-bootstrap` in the installation
//! order, the wait for CRDs to be Established, the per-object plan of `--dry-run` (a server-side
//! dry run compared with the live object), and the reads of the self Application, the Repository and
//! an existing Deployment the refusals need. Every write goes through [`apply_one`].

use std::sync::Arc;
use std::time::Instant;

use kube::core::GroupVersionKind;
use serde_json::Value;

use super::{BootstrapError, FIELD_MANAGER};
use crate::cluster::ops::{self, ApplyOptions};
use crate::cluster::{ClusterError, ClusterHandle};
use crate::engine::object::{self, ObjectKey};

/// What a dry run says an apply would do to one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The object does not exist.
    Create,
    /// The object exists and would change.
    Update,
    /// The object exists and would not change.
    Unchanged,
}

fn gvk(api_version: &str, kind: &str) -> GroupVersionKind {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}

/// The live object `api_version`/`kind` `namespace/name`, if it exists.
pub async fn get(
    cluster: &ClusterHandle,
    (api_version, kind): (&str, &str),
    namespace: &str,
    name: &str,
) -> Result<Option<Value>, ClusterError> {
    match ops::get(cluster, &gvk(api_version, kind), namespace, name).await {
        // A kind the cluster does not serve yet (before its CRD is applied): no such object.
        Err(ClusterError::NotFound(_) | ClusterError::UnknownKind(_)) => Ok(None),
        other => other,
    }
}

/// Server-side apply of `obj` as `capstan-bootstrap` (`dry_run`: validated, never persisted).
pub async fn apply_one(cluster: &ClusterHandle, obj: &Value, dry_run: bool) -> Result<Value, ClusterError> {
    let opts = ApplyOptions {
        dry_run,
        field_manager: FIELD_MANAGER,
        ..ApplyOptions::default()
    };
    ops::apply(cluster, obj, &opts).await
}

/// The fields that change on every write and say nothing about content.
fn content(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in [
            "managedFields",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "uid",
        ] {
            m.remove(f);
        }
    }
    if let Some(map) = o.as_object_mut() {
        map.remove("status");
    }
    o
}

/// What applying `obj` would do, from a server-side dry run against the live object.
pub async fn plan_one(cluster: &ClusterHandle, obj: &Value) -> Result<Change, ClusterError> {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let live = get(
        cluster,
        (api_version, object::kind(obj)),
        object::namespace(obj),
        object::name(obj),
    )
    .await?;
    let Some(live) = live else { return Ok(Change::Create) };
    let after = match apply_one(cluster, obj, true).await {
        Ok(after) => after,
        // The kind is not served yet (its CRD is part of this very plan): it would be created.
        Err(ClusterError::NotFound(_) | ClusterError::UnknownKind(_)) => return Ok(Change::Create),
        Err(e) => return Err(e),
    };
    Ok(if content(&after) == content(&live) {
        Change::Unchanged
    } else {
        Change::Update
    })
}

/// Whether `obj` is a CRD or a Namespace: applied first, waited for.
pub fn is_foundation(obj: &Value) -> bool {
    matches!(object::kind(obj), "CustomResourceDefinition" | "Namespace")
}

/// Applies `objects` in order and returns the keys of those that changed (no write for an
/// unchanged object: the plan is asked first).
pub async fn apply_changed(cluster: &ClusterHandle, objects: &[Value]) -> Result<Vec<String>, BootstrapError> {
    let mut changed = Vec::new();
    for obj in objects {
        if plan_one(cluster, obj).await? != Change::Unchanged {
            apply_one(cluster, obj, false).await?;
            changed.push(ObjectKey::of(obj).to_string());
        }
    }
    Ok(changed)
}

/// Waits until every CRD among `objects` is Established.
pub async fn wait_established(
    cluster: &ClusterHandle,
    objects: &[Value],
    deadline: Instant,
) -> Result<(), BootstrapError> {
    for crd in objects.iter().filter(|o| object::kind(o) == "CustomResourceDefinition") {
        let name = object::name(crd);
        loop {
            let live = get(
                cluster,
                ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
                "",
                name,
            )
            .await?;
            let established = live.as_ref().is_some_and(|l| {
                l.pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True"))
            });
            if established {
                break;
            }
            if Instant::now() >= deadline {
                return Err(BootstrapError::Timeout(format!("CRD {name} is not Established")));
            }
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }
    // The kinds just established were remembered as unknown: ask the server again.
    cluster.discovery().invalidate().await;
    Ok(())
}

/// Where the self Application stands.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SelfState {
    /// The revision the Repository fetched for the branch.
    pub fetched: Option<String>,
    /// `status.sync.status` and `status.sync.revision`.
    pub sync: (String, String),
    /// `status.health.status`.
    pub health: String,
}

impl SelfState {
    /// Whether the self Application is Synced and Healthy at `sha` and the Repository has it.
    pub fn done_at(&self, sha: &str) -> bool {
        self.fetched.as_deref() == Some(sha)
            && self.sync.0 == "Synced"
            && self.sync.1 == sha
            && self.health == "Healthy"
    }

    /// What is still missing for [`SelfState::done_at`], for progress lines and timeouts.
    pub fn waiting_for(&self, sha: &str) -> String {
        let short = &sha[..sha.len().min(7)];
        if self.fetched.as_deref() != Some(sha) {
            return format!(
                "the Repository to fetch {short} (has {})",
                self.fetched.as_deref().unwrap_or("nothing")
            );
        }
        if self.sync.1 != sha || self.sync.0 != "Synced" {
            return format!(
                "the self Application to be Synced at {short} (is {} at {})",
                self.sync.0, self.sync.1
            );
        }
        format!("the self Application to be Healthy (is {})", self.health)
    }
}

/// Reads the Repository and the self Application `namespace/name` tracking `branch`.
pub async fn self_state(
    cluster: &Arc<ClusterHandle>,
    namespace: &str,
    name: &str,
    branch: &str,
) -> Result<SelfState, ClusterError> {
    let repo = get(cluster, ("capstan.dev/v1alpha1", "Repository"), namespace, name).await?;
    let fetched = repo.as_ref().and_then(|r| {
        r.pointer("/status/lastFetchedRevision")
            .and_then(Value::as_array)?
            .iter()
            .find(|f| f["ref"] == branch)
            .and_then(|f| f["revision"].as_str())
            .map(str::to_string)
    });
    let app = get(cluster, ("capstan.dev/v1alpha1", "Application"), namespace, name).await?;
    let text = |p: &str| {
        app.as_ref()
            .and_then(|a| a.pointer(p))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Ok(SelfState {
        fetched,
        sync: (text("/status/sync/status"), text("/status/sync/revision")),
        health: text("/status/health/status"),
    })
}
