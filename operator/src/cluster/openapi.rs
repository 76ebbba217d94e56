//! The cluster's published schemas (`/openapi/v3`), fetched and cached per cluster for client-side
//! validation (`engine::schema`).
//!
//! The index (`/openapi/v3`: group/version → document URL with a content hash) is fetched on first use and
//! again once it is older than [`INDEX_TTL`], or sooner on a miss (a group/version or kind the cached index
//! or document does not have, as after a CRD was installed), at most every [`MISS_REFRESH`]. A document is
//! fetched again only when its URL (its hash) changed. Documents are bounded in size ([`MAX_DOCUMENT_BYTES`])
//! and number ([`MAX_DOCUMENTS`]), and kept trimmed of descriptions.
//!
//! Every failure (no `/openapi/v3`, a document too large, a timeout, a kind without a schema) answers
//! `None`: the caller then validates that object with a server-side dry run, as before. A failed index fetch
//! is not retried before [`MISS_REFRESH`], so a cluster without the endpoint costs one request per period.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Limited};
use kube::client::Body;
use kube::core::GroupVersionKind;
use kube::Client;
use serde_json::Value;

use super::{with_deadline, ClusterError};
use crate::engine::schema::SchemaDoc;

/// How long a fetched index is trusted before it is fetched again.
pub const INDEX_TTL: Duration = Duration::from_secs(60);
/// Least time between two index fetches caused by misses (or after a failed fetch).
pub const MISS_REFRESH: Duration = Duration::from_secs(2);
/// Largest index accepted.
pub const MAX_INDEX_BYTES: usize = 1 << 20;
/// Largest group/version document accepted (kube-apiserver's `api/v1`, the largest, is a few MiB).
pub const MAX_DOCUMENT_BYTES: usize = 32 << 20;
/// Most group/version documents kept per cluster; beyond it the cache starts afresh.
pub const MAX_DOCUMENTS: usize = 256;
/// Deadline of one fetch.
const FETCH_DEADLINE: Duration = Duration::from_secs(30);

/// One cluster's schema cache. Shared by a cluster handle and its impersonating handles.
pub struct SchemaCache {
    client: Client,
    state: tokio::sync::Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Group/version key (`api/v1`, `apis/apps/v1`) → document URL, as of `fetched`.
    index: HashMap<String, String>,
    fetched: Option<Instant>,
    /// Last index fetch attempt (successful or not).
    attempted: Option<Instant>,
    /// Key → (URL it was fetched from, trimmed document).
    docs: HashMap<String, (String, Arc<SchemaDoc>)>,
}

impl State {
    fn index_fresh(&self, now: Instant) -> bool {
        self.fetched.is_some_and(|t| now.duration_since(t) < INDEX_TTL)
    }

    fn may_refresh(&self, now: Instant) -> bool {
        self.attempted.is_none_or(|t| now.duration_since(t) >= MISS_REFRESH)
    }
}

impl SchemaCache {
    pub fn new(client: Client) -> Self {
        SchemaCache {
            client,
            state: tokio::sync::Mutex::new(State::default()),
        }
    }

    /// The schema document covering `gvk`, if the cluster publishes one for that kind.
    pub async fn schema_for(&self, gvk: &GroupVersionKind) -> Option<Arc<SchemaDoc>> {
        let key = doc_key(&gvk.group, &gvk.version);
        let mut state = self.state.lock().await;
        let now = Instant::now();
        if !state.index_fresh(now) && state.may_refresh(now) {
            self.refresh_index(&mut state, now).await;
        }
        if let Some(doc) = self.document(&mut state, &key, gvk).await {
            if doc.has_kind(&gvk.kind) {
                return Some(doc);
            }
        }
        // A miss: the index (or the document) may predate the kind.
        if !state.may_refresh(now) {
            return None;
        }
        self.refresh_index(&mut state, now).await;
        self.document(&mut state, &key, gvk)
            .await
            .filter(|d| d.has_kind(&gvk.kind))
    }

    /// After `doc` found an object invalid: the document now published for `gvk` when it differs from `doc`
    /// (the index is fetched again first, at most every [`MISS_REFRESH`]), so an object is never refused
    /// because of a schema that changed since it was cached (a CRD updated by this very sync).
    pub async fn newer_than(&self, gvk: &GroupVersionKind, doc: &Arc<SchemaDoc>) -> Option<Arc<SchemaDoc>> {
        let key = doc_key(&gvk.group, &gvk.version);
        let mut state = self.state.lock().await;
        let now = Instant::now();
        if state.may_refresh(now) {
            self.refresh_index(&mut state, now).await;
        }
        let current = self.document(&mut state, &key, gvk).await?;
        (!Arc::ptr_eq(&current, doc) && current.has_kind(&gvk.kind)).then_some(current)
    }

    /// Forgets everything (the next lookup fetches the index again).
    pub async fn invalidate(&self) {
        *self.state.lock().await = State::default();
    }

    async fn refresh_index(&self, state: &mut State, now: Instant) {
        state.attempted = Some(now);
        match self.fetch("/openapi/v3", MAX_INDEX_BYTES).await.and_then(parse_index) {
            Ok(index) => {
                state.index = index;
                state.fetched = Some(now);
            }
            Err(e) => {
                tracing::debug!(error = %e, "no OpenAPI v3 index; objects are validated by server dry runs");
                state.index.clear();
                state.fetched = None;
            }
        }
    }

    /// The cached document of `key`, fetched when its URL changed.
    async fn document(&self, state: &mut State, key: &str, gvk: &GroupVersionKind) -> Option<Arc<SchemaDoc>> {
        let url = state.index.get(key)?.clone();
        if let Some((cached_url, doc)) = state.docs.get(key) {
            if *cached_url == url {
                return Some(doc.clone());
            }
        }
        let doc = match self.fetch(&url, MAX_DOCUMENT_BYTES).await {
            Ok(raw) => Arc::new(SchemaDoc::from_document(raw, &gvk.group, &gvk.version)),
            Err(e) => {
                tracing::debug!(error = %e, document = key, "OpenAPI document unavailable");
                return None;
            }
        };
        if state.docs.len() >= MAX_DOCUMENTS {
            state.docs.clear();
        }
        state.docs.insert(key.to_string(), (url, doc.clone()));
        Some(doc)
    }

    /// GET `path` as JSON, refusing bodies over `limit` bytes.
    async fn fetch(&self, path: &str, limit: usize) -> Result<Value, ClusterError> {
        let context = format!("GET {}", path.split('?').next().unwrap_or(path));
        with_deadline(FETCH_DEADLINE, &context, async {
            let request = http::Request::get(path)
                .header(http::header::ACCEPT, "application/json")
                .body(Body::from(Vec::new()))
                .map_err(|e| ClusterError::Internal(format!("{context}: {e}")))?;
            let response = self
                .client
                .send(request)
                .await
                .map_err(|e| ClusterError::from_kube(e, &context, false))?;
            let status = response.status();
            if !status.is_success() {
                return Err(ClusterError::NotFound(format!("{context}: HTTP {}", status.as_u16())));
            }
            let body = Limited::new(response.into_body(), limit)
                .collect()
                .await
                .map_err(|e| ClusterError::Invalid(format!("{context}: {e} (limit {limit} bytes)")))?
                .to_bytes();
            serde_json::from_slice(&body).map_err(|e| ClusterError::Invalid(format!("{context}: {e}")))
        })
        .await
    }
}

/// The index's `paths`: key → `serverRelativeURL`.
fn parse_index(index: Value) -> Result<HashMap<String, String>, ClusterError> {
    let paths = index
        .get("paths")
        .and_then(Value::as_object)
        .ok_or_else(|| ClusterError::Invalid("OpenAPI v3 index without paths".into()))?;
    Ok(paths
        .iter()
        .filter_map(|(k, v)| {
            let url = v.get("serverRelativeURL").and_then(Value::as_str)?;
            url.starts_with('/').then(|| (k.clone(), url.to_string()))
        })
        .collect())
}

/// The index key of a group/version: `api/v1` for the core group, `apis/<group>/<version>` otherwise.
pub fn doc_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_keys_and_urls() {
        let index = serde_json::json!({"paths": {
            "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=AB"},
            "apis/apps/v1": {"serverRelativeURL": "/openapi/v3/apis/apps/v1?hash=CD"},
            "evil": {"serverRelativeURL": "https://elsewhere.example/x"}
        }});
        let parsed = parse_index(index).expect("index");
        assert_eq!(parsed[&doc_key("", "v1")], "/openapi/v3/api/v1?hash=AB");
        assert_eq!(parsed[&doc_key("apps", "v1")], "/openapi/v3/apis/apps/v1?hash=CD");
        assert!(!parsed.contains_key("evil"), "only server-relative URLs are followed");
        assert!(parse_index(serde_json::json!({})).is_err());
    }
}
