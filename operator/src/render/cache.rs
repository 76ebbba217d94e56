//! In-memory cache of rendered manifests.
//!
//! The key is a SHA-256 over *every* input that can change the output: repository URL, resolved
//! commit, application path, tool and tool version, all source options, application identity,
//! binaries and limits. Argo CD keyed on a 32-bit FNV of the source plus a few fields, which makes
//! collisions (and so serving one application's manifests to another) conceivable; a
//! cryptographic hash over length-prefixed fields rules that out. Memory is bounded by a byte
//! budget with least-recently-used eviction; a hard refresh bypasses the lookup and stores the
//! fresh result. Errors are never cached.
//!
//! Entries are kept as compact JSON text and parsed again on each hit: a parsed `serde_json::Value`
//! takes about eight times the bytes of its text (every JSON object is a B-tree with nodes of its own),
//! and the cache holds every Application's last render while a reconcile needs only its own (S1 heap
//! profile: 50,000 rendered ConfigMaps held about 130 MiB as values). The byte budget counts that text.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{paths, RenderError, RenderOutput, RenderRequest, Renderer, Tool};

/// Version of the key layout; bump when the hashed fields change.
const KEY_SCHEMA: &str = "capstan-render-cache-v1";

/// A SHA-256 digest identifying one render.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey(pub [u8; 32]);

impl CacheKey {
    /// Computes the key for rendering `req` with `tool` at `tool_version`. Pure.
    pub fn compute(req: &RenderRequest, tool: Tool, tool_version: &str) -> CacheKey {
        let mut hasher = KeyHasher(Sha256::new());
        hasher.field(KEY_SCHEMA);
        hasher.field(normalize_repo_url(&req.repo_url));
        hasher.field(req.revision.trim());
        // `a/./b`, `a/b/` and `a/b` are the same directory; an invalid path fails before caching.
        let app_path = paths::join_lexically(std::path::Path::new(""), &req.app_path, paths::AbsolutePaths::Reject)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| req.app_path.clone());
        hasher.field(&app_path);
        hasher.field(tool.as_str());
        hasher.field(tool_version);
        hasher.field(&canonical_json(
            &serde_json::to_value(&req.source).unwrap_or(Value::Null),
        ));
        hasher.field(&req.app_name);
        hasher.field(&req.app_namespace);
        hasher.field(&req.destination_namespace);
        hasher.field(&canonical_json(
            &serde_json::to_value(&req.binaries).unwrap_or(Value::Null),
        ));
        hasher.field(&canonical_json(
            &serde_json::to_value(&req.limits).unwrap_or(Value::Null),
        ));
        CacheKey(hasher.0.finalize().into())
    }

    /// Lowercase hex, for logs and metrics.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Feeds length-prefixed fields, so `("ab", "c")` and `("a", "bc")` hash differently.
struct KeyHasher(Sha256);

impl KeyHasher {
    fn field(&mut self, value: &str) {
        self.0.update((value.len() as u64).to_be_bytes());
        self.0.update(value.as_bytes());
    }
}

/// Trims whitespace and trailing slashes; URLs are otherwise compared exactly. Pure.
fn normalize_repo_url(url: &str) -> &str {
    url.trim().trim_end_matches('/')
}

/// JSON with object keys sorted at every level, independent of map ordering features. Pure.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, &Value> = map.iter().collect();
            out.push('{');
            for (i, (k, v)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Counters for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub entries: usize,
    pub bytes: usize,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
}

struct Entry {
    value: Arc<Stored>,
    size: usize,
    tick: u64,
}

/// A render as the cache keeps it: each object as compact JSON text.
struct Stored {
    objects: Vec<Box<str>>,
    tool: Tool,
    tool_version: String,
    reads: super::reads::ReadSet,
}

impl Stored {
    fn of(output: &RenderOutput) -> Stored {
        Stored {
            // Serializing a `Value` cannot fail (its keys are strings).
            objects: output
                .objects
                .iter()
                .map(|o| serde_json::to_string(o).unwrap_or_default().into_boxed_str())
                .collect(),
            tool: output.tool,
            tool_version: output.tool_version.clone(),
            reads: output.reads.clone(),
        }
    }

    /// The output, parsed again; `None` (a miss) only if text written from a `Value` ever failed to
    /// parse back.
    fn output(&self) -> Option<RenderOutput> {
        let objects = self
            .objects
            .iter()
            .map(|o| serde_json::from_str(o))
            .collect::<Result<Vec<Value>, _>>()
            .map_err(|e| tracing::error!(error = %e, "a cached render does not parse back; rendering again"))
            .ok()?;
        Some(RenderOutput {
            objects,
            tool: self.tool,
            tool_version: self.tool_version.clone(),
            reads: self.reads.clone(),
        })
    }
}

#[derive(Default)]
struct Inner {
    entries: HashMap<CacheKey, Entry>,
    /// Recency order: tick → key; the smallest tick is the least recently used.
    order: BTreeMap<u64, CacheKey>,
    tick: u64,
    stats: CacheStats,
}

impl Inner {
    fn touch(&mut self, key: &CacheKey) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(entry) = self.entries.get_mut(key) {
            self.order.remove(&entry.tick);
            entry.tick = tick;
            self.order.insert(tick, *key);
        }
    }

    fn remove(&mut self, key: &CacheKey) {
        if let Some(entry) = self.entries.remove(key) {
            self.order.remove(&entry.tick);
            self.stats.bytes -= entry.size;
        }
    }
}

/// A byte-bounded LRU map from [`CacheKey`] to rendered output.
pub struct RenderCache {
    max_bytes: usize,
    inner: Mutex<Inner>,
}

impl RenderCache {
    pub fn new(max_bytes: usize) -> RenderCache {
        RenderCache {
            max_bytes,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps inconsistent in a way that matters
        // for a cache; keep serving.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, key: &CacheKey) -> Option<Arc<RenderOutput>> {
        let found = {
            let mut inner = self.lock();
            let found = inner.entries.get(key).map(|e| Arc::clone(&e.value));
            if found.is_some() {
                inner.touch(key);
            }
            found
        };
        // Parsed outside the lock: other reconciles' lookups need not wait for it.
        let output = found.and_then(|stored| stored.output());
        let mut inner = self.lock();
        if output.is_some() {
            inner.stats.hits += 1;
        } else {
            inner.stats.misses += 1;
        }
        output.map(Arc::new)
    }

    /// Stores the entry of `from` under `to` as well (one copy in memory, counted against the budget
    /// under both keys); false when `from` is not cached.
    pub fn alias(&self, from: &CacheKey, to: CacheKey) -> bool {
        let found = self.lock().entries.get(from).map(|e| (Arc::clone(&e.value), e.size));
        match found {
            Some((value, size)) => {
                self.store(to, value, size);
                true
            }
            None => false,
        }
    }

    /// Stores `value`, evicting least recently used entries to stay within the byte budget.
    /// Values larger than the whole budget are not stored.
    pub fn insert(&self, key: CacheKey, value: Arc<RenderOutput>) {
        let size = value.approx_bytes();
        if size > self.max_bytes {
            self.lock().remove(&key);
            return;
        }
        self.store(key, Arc::new(Stored::of(&value)), size);
    }

    fn store(&self, key: CacheKey, value: Arc<Stored>, size: usize) {
        let mut inner = self.lock();
        inner.remove(&key);
        if size > self.max_bytes {
            return;
        }
        while inner.stats.bytes + size > self.max_bytes {
            let Some((_, oldest)) = inner.order.pop_first() else {
                break;
            };
            if let Some(entry) = inner.entries.remove(&oldest) {
                inner.stats.bytes -= entry.size;
                inner.stats.evictions += 1;
            }
        }
        inner.tick += 1;
        let tick = inner.tick;
        inner.order.insert(tick, key);
        inner.entries.insert(key, Entry { value, size, tick });
        inner.stats.bytes += size;
    }

    pub fn stats(&self) -> CacheStats {
        let inner = self.lock();
        CacheStats {
            entries: inner.entries.len(),
            ..inner.stats
        }
    }
}

/// A [`Renderer`] in front of a [`RenderCache`].
pub struct CachingRenderer {
    pub renderer: Renderer,
    pub cache: RenderCache,
}

impl CachingRenderer {
    pub fn new(max_bytes: usize) -> CachingRenderer {
        CachingRenderer {
            renderer: Renderer::new(),
            cache: RenderCache::new(max_bytes),
        }
    }

    /// Renders `req`, serving a cached result unless `hard_refresh` is set.
    pub async fn render(&self, req: &RenderRequest, hard_refresh: bool) -> Result<Arc<RenderOutput>, RenderError> {
        self.render_since(req, hard_refresh, None, |_| async { false })
            .await
            .map(|(output, _)| output)
    }

    /// Renders `req` like [`render`](Self::render), and when the same request at the
    /// `previous` revision is still cached, asks `reusable` whether the commit between them left
    /// that render valid (it decides from the previous output's [`ReadSet`](super::reads::ReadSet));
    /// a reused render is stored under the new revision too. A hard refresh always renders.
    pub async fn render_since<F, Fut>(
        &self,
        req: &RenderRequest,
        hard_refresh: bool,
        previous: Option<&str>,
        reusable: F,
    ) -> Result<(Arc<RenderOutput>, Served), RenderError>
    where
        F: FnOnce(Arc<RenderOutput>) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let tool = self.renderer.detect(req).await?;
        let version = self.renderer.tool_version(tool, req).await?;
        let key = CacheKey::compute(req, tool, &version);
        if !hard_refresh {
            if let Some(hit) = self.cache.get(&key) {
                tracing::debug!(key = %key.to_hex(), "render cache hit");
                return Ok((hit, Served::Cached));
            }
            let earlier = previous
                .filter(|rev| rev.trim() != req.revision.trim())
                .and_then(|rev| {
                    let mut before = req.clone();
                    before.revision = rev.to_string();
                    let before = CacheKey::compute(&before, tool, &version);
                    self.cache.get(&before).map(|output| (before, output))
                });
            if let Some((before, earlier)) = earlier {
                if reusable(Arc::clone(&earlier)).await {
                    if !self.cache.alias(&before, key) {
                        // Evicted meanwhile: store it again.
                        self.cache.insert(key, Arc::clone(&earlier));
                    }
                    return Ok((earlier, Served::Unchanged));
                }
            }
        }
        let output = Arc::new(self.renderer.render_with(req, tool, version).await?);
        self.cache.insert(key, Arc::clone(&output));
        Ok((output, Served::Rendered))
    }
}

/// How [`CachingRenderer::render_since`] produced its output (the `result` of
/// `capstan_render_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// The same inputs were rendered before: the cached output.
    Cached,
    /// A new commit touched nothing the render read: the previous revision's output.
    Unchanged,
    /// The tool ran.
    Rendered,
}

impl Served {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Served::Cached => "cached",
            Served::Unchanged => "unchanged",
            Served::Rendered => "rendered",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::testutil::*;
    use crate::render::{DirectoryOptions, HelmOptions, SourceOptions};
    use serde_json::json;

    fn output(bytes: usize) -> Arc<RenderOutput> {
        let filler = "x".repeat(bytes);
        Arc::new(RenderOutput {
            objects: vec![json!({"f": filler})],
            tool: Tool::Directory,
            tool_version: String::new(),
            reads: Default::default(),
        })
    }

    fn key(n: u8) -> CacheKey {
        CacheKey([n; 32])
    }

    #[test]
    fn keys_cover_every_input() {
        let root = std::path::Path::new("/w/repo");
        let base = request(root, "apps/a", SourceOptions::default());
        let k = |r: &RenderRequest| CacheKey::compute(r, Tool::Directory, "v1");
        let original = k(&base);
        assert_eq!(original, k(&request(root, "apps/./a/", SourceOptions::default())));
        let mut variants = Vec::new();
        let mut r = base.clone();
        r.revision = "ffff".into();
        variants.push(r);
        let mut r = base.clone();
        r.repo_url = "https://git.example.com/other.git".into();
        variants.push(r);
        variants.push(request(root, "apps/b", SourceOptions::default()));
        let mut r = base.clone();
        r.source.directory = Some(DirectoryOptions {
            recurse: true,
            ..Default::default()
        });
        variants.push(r);
        let mut r = base.clone();
        r.source.helm = Some(HelmOptions {
            values_object: Some(json!({"a": 1})),
            ..Default::default()
        });
        variants.push(r);
        let mut r = base.clone();
        r.app_name = "other".into();
        variants.push(r);
        let mut r = base.clone();
        r.limits.max_objects = 1;
        variants.push(r);
        for v in &variants {
            assert_ne!(k(v), original);
        }
        assert_ne!(CacheKey::compute(&base, Tool::Directory, "v2"), original);
        assert_ne!(CacheKey::compute(&base, Tool::Helm, "v1"), original);
        assert_eq!(original.to_hex().len(), 64);
    }

    #[test]
    fn canonical_json_sorts_keys() {
        assert_eq!(
            canonical_json(&json!({"b": 1, "a": {"d": [2, {"z": 1, "y": 2}], "c": null}})),
            r#"{"a":{"c":null,"d":[2,{"y":2,"z":1}]},"b":1}"#
        );
    }

    #[test]
    fn lru_eviction_within_byte_budget() {
        let size = output(1000).approx_bytes();
        let cache = RenderCache::new(size * 3);
        for n in 0..3 {
            cache.insert(key(n), output(1000));
        }
        assert!(cache.get(&key(0)).is_some()); // 0 is now most recently used
        cache.insert(key(3), output(1000));
        assert!(cache.get(&key(1)).is_none(), "least recently used entry is evicted");
        assert!(cache.get(&key(0)).is_some() && cache.get(&key(2)).is_some() && cache.get(&key(3)).is_some());
        let stats = cache.stats();
        assert_eq!((stats.entries, stats.evictions), (3, 1));
        assert!(stats.bytes <= size * 3);
        cache.insert(key(9), output(size * 4));
        assert!(cache.get(&key(9)).is_none(), "oversized values are not stored");
        assert_eq!(cache.stats().entries, 3);
    }

    #[tokio::test]
    async fn hit_miss_and_hard_refresh() {
        let tmp = tempfile::tempdir().unwrap();
        let cm = |name: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\n");
        write_files(tmp.path(), &[("app/a.yaml", &cm("first"))]);
        let renderer = CachingRenderer::new(1 << 20);
        let req = request(tmp.path(), "app", SourceOptions::default());
        let first = renderer.render(&req, false).await.unwrap();
        assert_eq!(names(&first.objects), ["first"]);
        // Same commit: the checkout is assumed immutable, so a change on disk is not seen...
        write_files(tmp.path(), &[("app/a.yaml", &cm("second"))]);
        let cached = renderer.render(&req, false).await.unwrap();
        assert_eq!(names(&cached.objects), ["first"]);
        assert_eq!(
            cached.objects, first.objects,
            "the cached text parses back to the same objects"
        );
        // ...until a hard refresh, which re-renders and replaces the entry.
        let fresh = renderer.render(&req, true).await.unwrap();
        assert_eq!(names(&fresh.objects), ["second"]);
        assert_eq!(names(&renderer.render(&req, false).await.unwrap().objects), ["second"]);
        // A new commit is a different key.
        let mut next = req.clone();
        next.revision = "feedface".into();
        renderer.render(&next, false).await.unwrap();
        let stats = renderer.cache.stats();
        assert_eq!((stats.hits, stats.misses, stats.entries), (2, 2, 2));
    }

    #[test]
    fn entries_are_kept_as_text_and_read_back_whole() {
        let reads = super::super::reads::ReadSet {
            paths: vec!["app".into()],
            uncertain: None,
        };
        let output = Arc::new(RenderOutput {
            objects: vec![
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"x": "ü"}},
                    "data": {"n": "1"}}),
                json!({"kind": "Thing", "spec": {"replicas": 3, "ratio": 0.5, "big": 18446744073709551615u64,
                    "list": [null, true, {"deep": [1, -2]}]}}),
            ],
            tool: Tool::Helm,
            tool_version: "v3.16.0".into(),
            reads: reads.clone(),
        });
        let cache = RenderCache::new(1 << 20);
        cache.insert(key(1), Arc::clone(&output));
        let stats = cache.stats();
        assert_eq!(stats.bytes, output.approx_bytes(), "the budget counts the stored text");
        let back = cache.get(&key(1)).unwrap();
        assert_eq!(back.objects, output.objects);
        assert_eq!(
            (back.tool, back.tool_version.as_str(), &back.reads),
            (Tool::Helm, "v3.16.0", &reads)
        );
        // A reused render is the same stored entry under a second key.
        assert!(cache.alias(&key(1), key(2)));
        assert!(!cache.alias(&key(7), key(8)), "nothing to alias");
        assert_eq!(cache.get(&key(2)).unwrap().objects, output.objects);
        assert_eq!(cache.stats().entries, 2);
    }

    #[tokio::test]
    async fn errors_are_not_cached() {
        let tmp = tempfile::tempdir().unwrap();
        write_files(tmp.path(), &[("app/a.yaml", "not: [valid\n")]);
        let renderer = CachingRenderer::new(1 << 20);
        let req = request(tmp.path(), "app", SourceOptions::default());
        assert!(renderer.render(&req, false).await.is_err());
        assert_eq!(renderer.cache.stats().entries, 0);
    }
}
