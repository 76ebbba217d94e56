//! List with selectors and pagination. Pages are snapshot-consistent: the first page of a limited
//! list stores the filtered result set, and the continue token names it (with the list RV and an offset).
//! A token whose snapshot was evicted (or issued before a restart) is served from the storage at the token's
//! RV, which etcd keeps until it compacts it; the in-memory store has only the current state, so there such a
//! token answers 410 Expired once anything changed, as the real server does for a compacted RV.
//! Lists are serialized item by item into one buffer to keep a 10,000-object list cheap.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Response;
use base64::Engine;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::registry::ResourceInfo;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::ReadAtError;

use super::negotiate::{negotiate, Output, Supports};
use super::query::Query;
use super::{include_object, json_bytes, json_response, ops, Ctx, Shared};

const MAX_SNAPSHOTS: usize = 64;
const SNAPSHOT_TTL: Duration = Duration::from_secs(300);

/// A filtered result set shared by the pages of one list.
type Snapshot = Arc<Vec<Arc<Value>>>;

/// Stored result sets of paginated lists.
#[derive(Default)]
pub struct PageCache {
    next_id: u64,
    entries: VecDeque<(u64, Instant, Snapshot)>,
}

impl PageCache {
    fn insert(&mut self, items: Snapshot) -> u64 {
        self.next_id += 1;
        let now = Instant::now();
        self.entries.retain(|(_, t, _)| now.duration_since(*t) < SNAPSHOT_TTL);
        while self.entries.len() >= MAX_SNAPSHOTS {
            self.entries.pop_front();
        }
        self.entries.push_back((self.next_id, now, items));
        self.next_id
    }

    fn get(&self, id: u64) -> Option<Snapshot> {
        self.entries
            .iter()
            .find(|(i, _, _)| *i == id)
            .map(|(_, _, v)| v.clone())
    }

    /// Forget all snapshots (compaction).
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

/// Parsed list parameters.
pub struct ListParams {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<u64>,
    pub cont: Option<String>,
    pub rv: Option<String>,
    pub rv_match: Option<String>,
}

impl ListParams {
    pub fn from_query(q: &Query, ri: &ResourceInfo) -> ApiResult<Self> {
        let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("invalid field selector: {e}")))?;
        fields
            .check_supported(&ri.group, &ri.kind)
            .map_err(ApiError::bad_request)?;
        Ok(ListParams {
            labels,
            fields,
            limit: q.uint("limit")?.filter(|n| *n > 0),
            cont: q.non_empty("continue").map(str::to_string),
            rv: q.non_empty("resourceVersion").map(str::to_string),
            rv_match: q.non_empty("resourceVersionMatch").map(str::to_string),
        })
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Token {
    rv: u64,
    id: u64,
    off: usize,
}

fn encode_token(t: &Token) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(t).unwrap_or_default())
}

fn decode_token(s: &str) -> ApiResult<Token> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .map_err(|_| ApiError::bad_request("invalid continue token"))?;
    serde_json::from_slice(&bytes).map_err(|_| ApiError::bad_request("invalid continue token"))
}

fn expired_continue() -> ApiError {
    ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
}

fn read_at_error(e: ReadAtError, expired: impl FnOnce() -> ApiError) -> ApiError {
    match e {
        ReadAtError::Expired => expired(),
        ReadAtError::Unavailable(detail) => ApiError::storage_unavailable(detail),
    }
}

/// The items a list's selectors keep.
fn filter(items: Vec<Arc<Value>>, p: &ListParams) -> Vec<Arc<Value>> {
    if p.labels.is_empty() && p.fields.is_empty() {
        items
    } else {
        items
            .into_iter()
            .filter(|o| ops::matches(o, &p.labels, &p.fields))
            .collect()
    }
}

/// One page of a list.
pub struct Page {
    pub rv: u64,
    pub items: Vec<Arc<Value>>,
    pub cont: Option<String>,
    pub remaining: Option<usize>,
}

/// Compute a page.
pub fn page(sh: &Shared, ri: &ResourceInfo, ns: Option<&str>, p: &ListParams) -> ApiResult<Page> {
    if p.rv_match.is_some() && p.rv.is_none() {
        return Err(ApiError::invalid_msg(
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        ));
    }
    let ns = if ri.namespaced { ns } else { None };
    let (rv, all, off, id) = match &p.cont {
        Some(c) => {
            let t = decode_token(c)?;
            let cached = sh.pages.lock().get(t.id);
            match cached {
                // The snapshot is kept here, but its revision must still exist in the storage (an etcd
                // compaction expires it as it would on a real server).
                Some(items) => {
                    sh.store
                        .revision_available(t.rv)
                        .map_err(|e| read_at_error(e, expired_continue))?;
                    (t.rv, items, t.off, Some(t.id))
                }
                // Evicted, or issued before a restart: read the storage at the token's revision (etcd keeps it
                // until compaction; memory only the current state).
                None => {
                    let items = sh
                        .store
                        .list_at(&ri.key, ns, t.rv)
                        .map_err(|e| read_at_error(e, expired_continue))?;
                    (t.rv, Arc::new(filter(items, p)), t.off, None)
                }
            }
        }
        None => {
            let current = sh.store.current_rv();
            let (rv, items) = match p.rv.as_deref().filter(|_| p.rv_match.as_deref() == Some("Exact")) {
                Some(want) if want != current.to_string() => {
                    let too_old = || ApiError::expired(format!("too old resource version: {want} ({current})"));
                    let at = want.parse().map_err(|_| too_old())?;
                    let items = sh
                        .store
                        .list_at(&ri.key, ns, at)
                        .map_err(|e| read_at_error(e, too_old))?;
                    (at, items)
                }
                _ => sh.store.list(&ri.key, ns),
            };
            (rv, Arc::new(filter(items, p)), 0, None)
        }
    };
    let off = off.min(all.len());
    let end = match p.limit {
        Some(l) => (off + l as usize).min(all.len()),
        None => all.len(),
    };
    let items = all[off..end].to_vec();
    let (cont, remaining) = if end < all.len() {
        let id = match id {
            Some(id) => id,
            None => sh.pages.lock().insert(all.clone()),
        };
        (Some(encode_token(&Token { rv, id, off: end })), Some(all.len() - end))
    } else {
        (None, None)
    };
    Ok(Page {
        rv,
        items,
        cont,
        remaining,
    })
}

fn list_meta(page: &Page) -> Value {
    let mut m = json!({"resourceVersion": page.rv.to_string()});
    if let Some(c) = &page.cont {
        m["continue"] = json!(c);
    }
    if let Some(r) = page.remaining {
        m["remainingItemCount"] = json!(r);
    }
    m
}

/// Serialize a plain list without building one big Value.
fn list_json(ri: &ResourceInfo, page: &Page) -> Vec<u8> {
    let mut buf = Vec::with_capacity(64 + page.items.len() * 512);
    buf.extend_from_slice(b"{\"kind\":");
    let _ = serde_json::to_writer(&mut buf, &ri.list_kind());
    buf.extend_from_slice(b",\"apiVersion\":");
    let _ = serde_json::to_writer(&mut buf, &ri.api_version());
    buf.extend_from_slice(b",\"metadata\":");
    let _ = serde_json::to_writer(&mut buf, &list_meta(page));
    buf.extend_from_slice(b",\"items\":[");
    for (i, item) in page.items.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        if ops::needs_version_fix(ri, item) {
            let _ = serde_json::to_writer(&mut buf, &ops::for_version(ri, item));
        } else {
            let _ = serde_json::to_writer(&mut buf, item.as_ref());
        }
    }
    buf.extend_from_slice(b"]}");
    buf
}

/// GET on a collection.
pub fn serve(sh: &Shared, ri: &ResourceInfo, ns: Option<&str>, ctx: &Ctx) -> ApiResult<Response<Body>> {
    let out = negotiate(
        &ctx.accept,
        Supports {
            table: true,
            metadata: true,
            discovery: false,
        },
    )?;
    let include = include_object(&ctx.query)?;
    let p = ListParams::from_query(&ctx.query, ri)?;
    let page = page(sh, ri, ns, &p)?;
    match out {
        Output::Table => {
            let cols = ri.custom.as_ref().and_then(|c| c.printer_columns.as_deref());
            // Only objects whose served shape differs are copied; the rest are borrowed from the store.
            let items: Vec<Arc<Value>> = page.items.iter().map(|o| ops::shaped(ri, o.clone())).collect();
            let refs: Vec<&Value> = items.iter().map(|o| o.as_ref()).collect();
            let mut t = crate::table::table(&ri.group, &ri.kind, cols, &refs, include, chrono::Utc::now());
            t.metadata = list_meta(&page);
            Ok(json_bytes(
                200,
                "application/json",
                serde_json::to_vec(&t).unwrap_or_default(),
            ))
        }
        Output::Metadata => {
            let items: Vec<Value> = page.items.iter().map(|o| super::partial_metadata(o)).collect();
            let v = json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta(&page), "items": items});
            Ok(json_response(200, &v))
        }
        _ => Ok(json_bytes(200, "application/json", list_json(ri, &page))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_roundtrip() {
        let t = Token { rv: 5, id: 7, off: 500 };
        let d = decode_token(&encode_token(&t)).unwrap();
        assert_eq!((d.rv, d.id, d.off), (5, 7, 500));
        assert!(decode_token("!!!").is_err());
    }

    #[test]
    fn page_cache_evicts() {
        let mut c = PageCache::default();
        let first = c.insert(Arc::new(Vec::new()));
        for _ in 0..MAX_SNAPSHOTS {
            c.insert(Arc::new(Vec::new()));
        }
        assert!(c.get(first).is_none());
        assert!(c.get(first + 1).is_some());
    }
}
