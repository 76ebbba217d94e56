//! Per-cluster discovery: GVK → `ApiResource` + scope, cached.
//!
//! The cache is filled by a full discovery (aggregated, two requests, falling back to the legacy per-group
//! walk) and refreshed on a miss, so a CRD created by the same sync becomes usable without a restart. A miss
//! may come in bursts (every object of a new kind), so full refreshes are rate limited; inside the limit a
//! miss asks the server about that one group/version (`pinned_kind`, one request), and a kind confirmed
//! absent is not asked about again within the limit. A partially broken cluster (a dead aggregated
//! APIService makes the legacy walk fail) still resolves the kinds that work, one group/version at a time.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use kube::core::GroupVersionKind;
use kube::discovery::{pinned_kind, ApiCapabilities, ApiResource, Discovery, Scope};
use kube::Client;

use super::{with_deadline, ClusterError};

/// Minimum time between two full discoveries, and how long a confirmed miss is remembered.
const DEFAULT_MIN_REFRESH: Duration = Duration::from_secs(2);
/// Deadline of one discovery round (full or pinned).
const DISCOVERY_DEADLINE: Duration = Duration::from_secs(30);

/// What the cluster says about one kind.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedKind {
    /// Group, version, kind and plural, for `Api::namespaced_with` / `Api::all_with`.
    pub resource: ApiResource,
    /// Namespaced (true) or cluster-scoped (false); from the server, never from the manifest.
    pub namespaced: bool,
    /// Verbs the resource supports (`get`, `list`, `watch`, `patch`, ...).
    pub verbs: Vec<String>,
}

impl ResolvedKind {
    fn new(resource: ApiResource, caps: &ApiCapabilities) -> Self {
        ResolvedKind {
            resource,
            namespaced: caps.scope == Scope::Namespaced,
            verbs: caps.operations.clone(),
        }
    }

    /// Whether the resource supports `verb`.
    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }
}

/// Cached discovery of one cluster. Cheap to share (`Arc`); lookups that hit never wait on I/O.
pub struct DiscoveryCache {
    client: Client,
    kinds: RwLock<HashMap<GroupVersionKind, Arc<ResolvedKind>>>,
    /// Serializes refreshes: concurrent misses wait for the one in flight and then re-check.
    refresh: tokio::sync::Mutex<RefreshState>,
    min_refresh: Duration,
}

#[derive(Default)]
struct RefreshState {
    last_full: Option<Instant>,
    misses: HashMap<GroupVersionKind, Instant>,
}

impl DiscoveryCache {
    pub fn new(client: Client) -> Self {
        Self::with_min_refresh(client, DEFAULT_MIN_REFRESH)
    }

    /// A cache whose full refreshes are at least `min_refresh` apart.
    pub fn with_min_refresh(client: Client, min_refresh: Duration) -> Self {
        DiscoveryCache {
            client,
            kinds: RwLock::new(HashMap::new()),
            refresh: tokio::sync::Mutex::new(RefreshState::default()),
            min_refresh,
        }
    }

    /// The kind's resource and scope; on a miss, refreshes (rate limited) and tries again.
    /// `UnknownKind` when the cluster does not serve it, `DiscoveryFailed` when discovery itself failed.
    pub async fn resolve(&self, gvk: &GroupVersionKind) -> Result<Arc<ResolvedKind>, ClusterError> {
        if let Some(hit) = self.cached(gvk) {
            return Ok(hit);
        }
        let mut state = self.refresh.lock().await;
        if let Some(hit) = self.cached(gvk) {
            return Ok(hit);
        }
        let now = Instant::now();
        if state
            .last_full
            .is_none_or(|t| now.duration_since(t) >= self.min_refresh)
        {
            state.last_full = Some(now);
            match self.refresh_all().await {
                Ok(()) => {
                    if let Some(hit) = self.cached(gvk) {
                        return Ok(hit);
                    }
                    state.misses.insert(gvk.clone(), now);
                    return Err(unknown(gvk));
                }
                // Partially broken discovery: fall through and ask about this one group/version.
                Err(e) => tracing::debug!(error = %e, "full discovery failed"),
            }
        }
        if state
            .misses
            .get(gvk)
            .is_some_and(|t| now.duration_since(*t) < self.min_refresh)
        {
            return Err(unknown(gvk));
        }
        match self.resolve_one(gvk).await {
            Ok(hit) => {
                state.misses.remove(gvk);
                Ok(hit)
            }
            Err(e) => {
                if matches!(e, ClusterError::UnknownKind(_) | ClusterError::NotFound(_)) {
                    state.misses.insert(gvk.clone(), now);
                    return Err(unknown(gvk));
                }
                Err(e)
            }
        }
    }

    /// Full discovery now, replacing the cache (kinds that went away disappear).
    pub async fn refresh_all(&self) -> Result<(), ClusterError> {
        let discovery = with_deadline(DISCOVERY_DEADLINE, "discovery", self.run_discovery()).await?;
        let mut kinds = HashMap::new();
        for group in discovery.groups() {
            for version in group.versions() {
                for (ar, caps) in group.versioned_resources(version) {
                    let gvk = GroupVersionKind::gvk(&ar.group, &ar.version, &ar.kind);
                    kinds.insert(gvk, Arc::new(ResolvedKind::new(ar, &caps)));
                }
            }
        }
        *self.kinds.write().unwrap_or_else(|e| e.into_inner()) = kinds;
        Ok(())
    }

    /// Forgets everything; the next lookup runs a full discovery (e.g. after a CRD was deleted).
    pub async fn invalidate(&self) {
        self.kinds.write().unwrap_or_else(|e| e.into_inner()).clear();
        let mut state = self.refresh.lock().await;
        state.last_full = None;
        state.misses.clear();
    }

    fn cached(&self, gvk: &GroupVersionKind) -> Option<Arc<ResolvedKind>> {
        self.kinds.read().unwrap_or_else(|e| e.into_inner()).get(gvk).cloned()
    }

    /// Aggregated discovery when the server offers it (2 requests), else the legacy walk.
    async fn run_discovery(&self) -> Result<Discovery, ClusterError> {
        match Discovery::new(self.client.clone()).run_aggregated().await {
            Ok(d) => Ok(d),
            Err(aggregated) => {
                tracing::debug!(error = %aggregated, "aggregated discovery unavailable, using legacy discovery");
                Discovery::new(self.client.clone())
                    .run()
                    .await
                    .map_err(|e| discovery_failed(ClusterError::from_kube(e, "discovery", false)))
            }
        }
    }

    /// One group/version's document, for a single kind.
    async fn resolve_one(&self, gvk: &GroupVersionKind) -> Result<Arc<ResolvedKind>, ClusterError> {
        let context = format!("discovery of {}", display_gvk(gvk));
        let (ar, caps) = with_deadline(DISCOVERY_DEADLINE, &context, async {
            pinned_kind(&self.client, gvk)
                .await
                .map_err(|e| ClusterError::from_kube(e, &context, false))
        })
        .await?;
        let resolved = Arc::new(ResolvedKind::new(ar, &caps));
        self.kinds
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(gvk.clone(), resolved.clone());
        Ok(resolved)
    }
}

/// `group/version/Kind` (`v1/ConfigMap` for the core group).
pub fn display_gvk(gvk: &GroupVersionKind) -> String {
    if gvk.group.is_empty() {
        format!("{}/{}", gvk.version, gvk.kind)
    } else {
        format!("{}/{}/{}", gvk.group, gvk.version, gvk.kind)
    }
}

fn unknown(gvk: &GroupVersionKind) -> ClusterError {
    ClusterError::UnknownKind(format!("{} is not served by the cluster", display_gvk(gvk)))
}

/// A failed discovery round is `DiscoveryFailed` unless it is already about reachability or permissions.
fn discovery_failed(e: ClusterError) -> ClusterError {
    match e {
        ClusterError::Unreachable(_)
        | ClusterError::Tls(_)
        | ClusterError::Timeout(_)
        | ClusterError::Unauthorized(_)
        | ClusterError::Forbidden(_) => e,
        other => ClusterError::DiscoveryFailed(other.to_string()),
    }
}

/// The GVK of a manifest (`apiVersion` + `kind`).
pub fn gvk_of(obj: &serde_json::Value) -> Result<GroupVersionKind, ClusterError> {
    let (group, version) = crate::engine::object::group_version(obj);
    let kind = crate::engine::object::kind(obj);
    if version.is_empty() || kind.is_empty() {
        return Err(ClusterError::Invalid("object without apiVersion or kind".into()));
    }
    Ok(GroupVersionKind::gvk(&group, &version, kind))
}
