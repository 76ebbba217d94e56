//! The HTTP front end: one fallback handler that authenticates and authorizes the request ([`crate::auth`]),
//! logs it with its user, applies admin-injected latency and faults, parses the URL itself,
//! negotiates the response form and calls the verb functions of [`ops`], [`list`] and [`watch`].
//! Every failure becomes a `Status` body; nothing here panics on client input. Connections are
//! accepted by [`listener`] (TLS or plain).

pub mod list;
pub mod listener;
pub mod negotiate;
pub mod ops;
pub mod query;
pub mod watch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use parking_lot::{Mutex, RwLock};
use serde_json::{json, Value};
use tokio::sync::watch as signal;

use crate::admin::{self, AdminState, RequestRecord};
use crate::auth::{self, AuthState, Identity};
use crate::error::{ApiError, ApiResult};
use crate::registry::{Registry, ResourceInfo};
use crate::store::Store;
use crate::table::IncludeObject;
use crate::{discovery, openapi};

use negotiate::{negotiate, Output, Supports};
use ops::{DeleteOpts, Deleted, FieldValidation, PatchType, Sub, WriteOpts, Written};
use query::Query;

/// Largest accepted request body (spec: bodies > 3 MiB → 413).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// Broadcast signals to open watches.
pub struct Signals {
    pub compact: signal::Sender<u64>,
    pub drop_watches: signal::Sender<u64>,
    pub paused: signal::Sender<bool>,
    pub shutdown: signal::Sender<bool>,
    /// Storage keys whose resource stopped being served (a deleted CRD): their open watches end, as the real
    /// server's cacher terminates its watchers when the CR storage is destroyed.
    pub resource_dropped: tokio::sync::broadcast::Sender<crate::registry::ResKey>,
}

impl Default for Signals {
    fn default() -> Self {
        Signals {
            compact: signal::channel(0).0,
            drop_watches: signal::channel(0).0,
            paused: signal::channel(false).0,
            shutdown: signal::channel(false).0,
            resource_dropped: tokio::sync::broadcast::channel(64).0,
        }
    }
}

/// Everything the handlers and controllers share.
pub struct Shared {
    pub store: Store,
    pub registry: RwLock<Registry>,
    pub minor: String,
    pub bookmark_interval: Duration,
    pub addr: SocketAddr,
    pub signals: Signals,
    pub admin: AdminState,
    pub pages: Mutex<list::PageCache>,
    pub openapi: Mutex<Option<Arc<openapi::Cache>>>,
    pub auth: AuthState,
}

impl Shared {
    /// Shared state over an in-memory store, with freshly generated keys and anonymous requests allowed
    /// (in-process tests).
    pub fn new(addr: SocketAddr, minor: String, bookmark_interval: Duration, history_limit: usize) -> Self {
        let store = Store::new(crate::rv_seed(), history_limit);
        let pki = auth::pki::Pki::load_or_create(None, &addr.ip().to_string()).expect("generating keys in memory");
        Self::with_store(
            addr,
            minor,
            bookmark_interval,
            store,
            pki,
            auth::NoCredentials::Anonymous,
        )
        .expect("keys generated just now load")
    }

    /// Shared state over `store` (in memory, or etcd) using `pki`; `no_credentials` says who requests without
    /// credentials are.
    pub fn with_store(
        addr: SocketAddr,
        minor: String,
        bookmark_interval: Duration,
        store: Store,
        pki: auth::pki::Pki,
        no_credentials: auth::NoCredentials,
    ) -> anyhow::Result<Self> {
        let auth = AuthState {
            signer: auth::jwt::Signer::new(&pki.sa_key_der)?,
            authorizer: auth::rbac::Authorizer::default(),
            pki,
            no_credentials,
            verified: Default::default(),
        };
        Ok(Shared {
            // The store, too, ends open watches when their history is gone (an etcd compaction it had to
            // reload after).
            signals: Signals {
                compact: store.compaction_signal(),
                ..Signals::default()
            },
            store,
            auth,
            registry: RwLock::new(Registry::new()),
            minor,
            bookmark_interval,
            addr,
            admin: AdminState::default(),
            pages: Mutex::new(list::PageCache::default()),
            openapi: Mutex::new(None),
        })
    }
}

/// Request facts the handlers need.
pub struct Ctx {
    pub method: Method,
    pub path: String,
    pub query: Query,
    pub accept: String,
    pub content_type: String,
    pub user_agent: String,
    /// Who the request runs as.
    pub identity: Identity,
}

fn header_str(h: &HeaderMap, name: header::HeaderName) -> String {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string()
}

/// The axum fallback handler: every request comes through here.
pub async fn handle(State(sh): State<Arc<Shared>>, req: Request<Body>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let raw_query = parts.uri.query().unwrap_or("").to_string();
    let query = Query::parse(&raw_query);
    // In-process callers (tests driving `handle` directly) have no connection and so no certificate.
    let cert_user = parts
        .extensions
        .get::<axum::extract::ConnectInfo<listener::Peer>>()
        .and_then(|c| c.0.cert_user.clone());
    let attrs = auth::request_info::request_attributes(parts.method.as_str(), &path, &query);
    let checked = auth::check(&sh, &parts.headers, cert_user.as_deref(), &attrs);
    let admin_path = path == "/_devcluster" || path.starts_with("/_devcluster/");
    let identity = match checked {
        // The test hooks can change and reveal anything: cluster admins only. They are not logged.
        Ok(id) if admin_path => {
            if !id.user.is_master() {
                return error_response(&auth::forbidden(&id.user.name, &attrs, ""));
            }
            return admin::handle(&sh, &parts.method, &path, &raw_query, body).await;
        }
        Ok(id) => id,
        Err((id, e)) => {
            let resp = error_response(&e);
            if !admin_path {
                sh.admin.record(record_of(
                    &parts.method,
                    &path,
                    raw_query,
                    &parts.headers,
                    id.as_ref(),
                    &resp,
                ));
            }
            return resp;
        }
    };
    let ctx = Ctx {
        method: parts.method.clone(),
        path,
        query,
        accept: header_str(&parts.headers, header::ACCEPT),
        content_type: header_str(&parts.headers, header::CONTENT_TYPE),
        user_agent: header_str(&parts.headers, header::USER_AGENT),
        identity,
    };
    let latency = sh.admin.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let resp = match sh.admin.take_fault(ctx.method.as_str(), &ctx.path) {
        Some(f) => admin::fault_response(&f),
        None => dispatch(&sh, &ctx, body).await.unwrap_or_else(|e| error_response(&e)),
    };
    sh.admin.record(record_of(
        &ctx.method,
        &ctx.path,
        raw_query,
        &parts.headers,
        Some(&ctx.identity),
        &resp,
    ));
    resp
}

/// The request log entry of one answered request.
fn record_of(
    method: &Method,
    path: &str,
    query: String,
    headers: &HeaderMap,
    id: Option<&Identity>,
    resp: &Response<Body>,
) -> RequestRecord {
    let (user, groups) = id.map_or((String::new(), Vec::new()), |i| {
        (i.authenticated.name.clone(), i.authenticated.groups.clone())
    });
    let imp = id.filter(|i| i.impersonating);
    RequestRecord {
        method: method.to_string(),
        path: path.to_string(),
        query,
        accept: header_str(headers, header::ACCEPT),
        content_type: header_str(headers, header::CONTENT_TYPE),
        user_agent: header_str(headers, header::USER_AGENT),
        status: resp.status().as_u16(),
        user,
        groups,
        impersonated_user: imp.map(|i| i.user.name.clone()),
        impersonated_groups: imp.map(|i| i.user.groups.clone()).unwrap_or_default(),
    }
}

// ------------------------------------------------------------------------------------------------------------
// Responses

pub fn json_bytes(code: u16, content_type: &str, body: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

pub fn json_response(code: u16, v: &Value) -> Response<Body> {
    json_bytes(code, "application/json", serde_json::to_vec(v).unwrap_or_default())
}

pub fn error_response(e: &ApiError) -> Response<Body> {
    let mut r = json_response(e.code, &e.to_status());
    if let Some(s) = e.retry_after_seconds {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

fn text_ok() -> Response<Body> {
    let mut r = Response::new(Body::from("ok"));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn add_warnings(r: &mut Response<Body>, warnings: &[String]) {
    for w in warnings {
        let v = format!("299 - \"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""));
        if let Ok(h) = HeaderValue::from_str(&v) {
            r.headers_mut().append(header::WARNING, h);
        }
    }
}

// ------------------------------------------------------------------------------------------------------------
// Routing

async fn read_body(body: Body) -> ApiResult<bytes::Bytes> {
    axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| ApiError::too_large("the request body is too large (limit 3 MiB)"))
}

fn only_get(ctx: &Ctx) -> ApiResult<()> {
    if ctx.method == Method::GET || ctx.method == Method::HEAD {
        Ok(())
    } else {
        Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({})",
            ctx.method
        )))
    }
}

async fn dispatch(sh: &Arc<Shared>, ctx: &Ctx, body: Body) -> ApiResult<Response<Body>> {
    let segs = query::segments(&ctx.path);
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    match s.as_slice() {
        ["version"] => {
            only_get(ctx)?;
            Ok(json_response(200, &version(&sh.minor)))
        }
        ["healthz" | "livez" | "readyz", ..] => Ok(text_ok()),
        ["api"] | ["apis"] => {
            only_get(ctx)?;
            discovery_root(sh, ctx, s[0] == "api")
        }
        ["apis", g] => {
            only_get(ctx)?;
            let reg = sh.registry.read();
            discovery::api_group(&reg, g)
                .map(|v| json_response(200, &v))
                .ok_or_else(ApiError::no_such_path)
        }
        ["api", v] => {
            only_get(ctx)?;
            resource_list(sh, "", v)
        }
        ["apis", g, v] => {
            only_get(ctx)?;
            resource_list(sh, g, v)
        }
        ["openapi", "v3"] => {
            only_get(ctx)?;
            Ok(json_response(200, &openapi::cache(sh).index))
        }
        ["api", "v1", "namespaces", ns, "serviceaccounts", name, "token"] => {
            if ctx.method != Method::POST {
                return Err(ApiError::method_not_allowed(format!(
                    "the server does not allow this method on the requested resource ({})",
                    ctx.method
                )));
            }
            let raw = read_body(body).await?;
            let (obj, _) = ops::decode_body(&ctx.content_type, &raw)?;
            let out = auth::tokens::token_request(sh, ns, name, obj)?;
            Ok(json_response(201, &out))
        }
        ["openapi", "v3", rest @ ..] => {
            only_get(ctx)?;
            let key = rest.join("/");
            openapi::cache(sh)
                .docs
                .get(&key)
                .map(|(doc, _)| json_response(200, doc))
                .ok_or_else(ApiError::no_such_path)
        }
        ["openapi", "v2"] => {
            only_get(ctx)?;
            let cache = openapi::cache(sh);
            let (doc, pb) = cache.v2();
            let accept = ctx.accept.replace('@', ".");
            if accept.contains(openapi::v2::PROTOBUF_RESPONSE) {
                Ok(json_bytes(200, openapi::v2::PROTOBUF_RESPONSE, pb.clone()))
            } else {
                Ok(json_response(200, doc))
            }
        }
        ["api", v, rest @ ..] => resource(sh, ctx, "", v, rest, body).await,
        ["apis", g, v, rest @ ..] => {
            let out = resource(sh, ctx, g, v, rest, body).await;
            // A client's RBAC change is in force for its next request, not only once the feed catches up.
            if *g == auth::rbac::RBAC_GROUP && ctx.method != Method::GET {
                sh.auth.authorizer.invalidate();
            }
            out
        }
        _ => Err(ApiError::no_such_path()),
    }
}

fn resource_list(sh: &Shared, group: &str, version: &str) -> ApiResult<Response<Body>> {
    let reg = sh.registry.read();
    discovery::resource_list(&reg, group, version)
        .map(|v| json_response(200, &v))
        .ok_or_else(ApiError::no_such_path)
}

/// `/version`.
pub fn version(minor: &str) -> Value {
    json!({"major": "1", "minor": minor, "gitVersion": format!("v1.{minor}.0-devcluster"), "gitCommit": "0",
        "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23", "compiler": "gc",
        "platform": "linux/amd64"})
}

fn discovery_root(sh: &Shared, ctx: &Ctx, core: bool) -> ApiResult<Response<Body>> {
    let out = negotiate(
        &ctx.accept,
        Supports {
            discovery: true,
            ..Default::default()
        },
    )?;
    let reg = sh.registry.read();
    match out {
        Output::Discovery(v) => {
            let doc = discovery::aggregated(&reg, core, v);
            let ct = format!("application/json;g=apidiscovery.k8s.io;v={v};as=APIGroupDiscoveryList");
            Ok(json_bytes(200, &ct, serde_json::to_vec(&doc).unwrap_or_default()))
        }
        _ if core => Ok(json_response(200, &discovery::api_versions(&sh.addr))),
        _ => Ok(json_response(200, &discovery::api_group_list(&reg))),
    }
}

/// A resolved resource URL.
pub struct Target {
    pub ri: Arc<ResourceInfo>,
    pub ns: Option<String>,
    pub name: Option<String>,
    pub sub: Sub,
    pub watch_prefix: bool,
}

fn resolve(sh: &Shared, group: &str, version: &str, rest: &[&str]) -> ApiResult<Target> {
    let reg = sh.registry.read();
    let mut rest = rest;
    let watch_prefix = rest.first() == Some(&"watch");
    if watch_prefix {
        rest = &rest[1..];
    }
    let namespaced_plural = |p: &str| reg.find(group, version, p).is_some_and(|r| r.namespaced);
    let (ns, rest) = if rest.len() >= 3 && rest[0] == "namespaces" && namespaced_plural(rest[2]) {
        (Some(rest[1].to_string()), &rest[2..])
    } else {
        (None, rest)
    };
    let Some(plural) = rest.first() else {
        return Err(ApiError::no_such_path());
    };
    let ri = reg.find(group, version, plural).ok_or_else(ApiError::no_such_path)?;
    if rest.len() > 3 || (!ri.namespaced && ns.is_some()) {
        return Err(ApiError::no_such_path());
    }
    let sub = match rest.get(2) {
        None => Sub::Main,
        Some(&"status") if ri.status => Sub::Status,
        Some(&"scale") if ri.scale.is_some() => Sub::Scale,
        Some(&"finalize") if ri.key.as_ref() == crate::store::NAMESPACES => Sub::Main,
        Some(_) => return Err(ApiError::no_such_path()),
    };
    Ok(Target {
        ri,
        ns,
        name: rest.get(1).map(|s| s.to_string()),
        sub,
        watch_prefix,
    })
}

fn write_opts(sh: &Arc<Shared>, ctx: &Ctx, ri: &ResourceInfo, ns: Option<&str>) -> ApiResult<WriteOpts> {
    let dry_run = match ctx.query.get("dryRun") {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: \"{other}\": supported values: \"All\""
            )))
        }
    };
    let field_manager = ctx.query.non_empty("fieldManager").map(str::to_string);
    let ua_prefix = ctx.user_agent.split('/').next().unwrap_or("").trim().to_string();
    let manager = field_manager.clone().unwrap_or_else(|| {
        if ua_prefix.is_empty() {
            "unknown".into()
        } else {
            ua_prefix
        }
    });
    Ok(WriteOpts {
        dry_run,
        manager,
        field_manager,
        validation: FieldValidation::parse(ctx.query.get("fieldValidation"))?,
        force: ctx.query.flag("force")?,
        admit: auth::escalation::admit_hook(sh, &ctx.identity.user, &ri.plural, &ri.group, ns.unwrap_or("")),
    })
}

fn include_object(q: &Query) -> ApiResult<IncludeObject> {
    match q.get("includeObject").unwrap_or("") {
        "" | "Metadata" => Ok(IncludeObject::Metadata),
        "None" => Ok(IncludeObject::None),
        "Object" => Ok(IncludeObject::Object),
        other => Err(ApiError::bad_request(format!(
            "includeObject: Unsupported value: \"{other}\""
        ))),
    }
}

/// Render one object in the negotiated form.
pub fn render_object(ri: &ResourceInfo, out: Output, include: IncludeObject, obj: &Value) -> Value {
    match out {
        Output::Table => {
            let cols = ri.custom.as_ref().and_then(|c| c.printer_columns.as_deref());
            let owned;
            let shaped = if ops::needs_version_fix(ri, obj) {
                owned = ops::for_version(ri, obj);
                &owned
            } else {
                obj
            };
            let mut t = crate::table::table(&ri.group, &ri.kind, cols, &[shaped], include, chrono::Utc::now());
            t.metadata =
                json!({"resourceVersion": obj.pointer("/metadata/resourceVersion").cloned().unwrap_or(json!(""))});
            t.to_value()
        }
        Output::Metadata => partial_metadata(obj),
        _ => ops::for_version(ri, obj),
    }
}

pub fn partial_metadata(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))})
}

fn object_response(
    ri: &ResourceInfo,
    ctx: &Ctx,
    code: u16,
    obj: &Value,
    warnings: &[String],
) -> ApiResult<Response<Body>> {
    let out = negotiate(
        &ctx.accept,
        Supports {
            table: ctx.method == Method::GET,
            metadata: true,
            discovery: false,
        },
    )?;
    let include = include_object(&ctx.query)?;
    let mut r = json_response(code, &render_object(ri, out, include, obj));
    add_warnings(&mut r, warnings);
    Ok(r)
}

fn written_response(ri: &ResourceInfo, ctx: &Ctx, w: Written) -> ApiResult<Response<Body>> {
    let code = if w.created { 201 } else { 200 };
    if w.object.get("kind").and_then(Value::as_str) == Some("Scale") {
        let mut r = json_response(code, &w.object);
        add_warnings(&mut r, &w.warnings);
        return Ok(r);
    }
    object_response(ri, ctx, code, &w.object, &w.warnings)
}

fn patch_type(ct: &str) -> ApiResult<PatchType> {
    let media = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match media.as_str() {
        "application/json-patch+json" => Ok(PatchType::Json),
        "application/merge-patch+json" => Ok(PatchType::Merge),
        "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
        "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchType::Apply),
        other => Err(ops::unsupported_body(other)),
    }
}

async fn resource(
    sh: &Arc<Shared>,
    ctx: &Ctx,
    group: &str,
    version: &str,
    rest: &[&str],
    body: Body,
) -> ApiResult<Response<Body>> {
    // Never answer from a cache staler than the storage (etcd), nor when it cannot be reached.
    sh.store.sync().await.map_err(ApiError::storage_unavailable)?;
    let t = resolve(sh, group, version, rest)?;
    let ri = t.ri.clone();
    let ns = t.ns.as_deref();
    if ri.create_only {
        if !(ctx.method == Method::POST && t.name.is_none() && t.sub == Sub::Main) {
            return Err(ApiError::method_not_allowed(
                "only create is supported for this resource",
            ));
        }
        let raw = read_body(body).await?;
        let (obj, _) = ops::decode_body(&ctx.content_type, &raw)?;
        let out = auth::reviews::create(sh, &ctx.identity, &ri, ns, obj)?;
        return Ok(json_response(201, &out));
    }
    match (&ctx.method, t.name.as_deref()) {
        (&Method::GET, None) if t.sub == Sub::Main => {
            if t.watch_prefix || ctx.query.flag("watch")? {
                watch::serve(sh.clone(), ri, t.ns.clone(), ctx)
            } else {
                list::serve(sh, &ri, ns, ctx)
            }
        }
        (&Method::GET, Some(name)) => {
            let r = ops::obj_ref(&ri, ns, name);
            let obj = sh
                .store
                .get(&r.res, &r.ns, &r.name)
                .ok_or_else(|| ApiError::not_found(&ri.plural, &ri.group, name))?;
            if t.sub == Sub::Scale {
                return Ok(json_response(200, &ops::scale_of(&ri, &obj)?));
            }
            object_response(&ri, ctx, 200, &obj, &[])
        }
        (&Method::POST, None) if t.sub == Sub::Main => {
            if ri.namespaced && ns.is_none() {
                return Err(ApiError::method_not_allowed("create requires a namespace in the URL"));
            }
            let raw = read_body(body).await?;
            let (obj, dups) = ops::decode_body(&ctx.content_type, &raw)?;
            let opts = write_opts(sh, ctx, &ri, ns)?;
            let w = ops::create(sh, &ri, ns, obj, &dups, &opts)?;
            written_response(&ri, ctx, w)
        }
        (&Method::PUT, Some(name)) => {
            let raw = read_body(body).await?;
            let (obj, dups) = ops::decode_body(&ctx.content_type, &raw)?;
            let opts = write_opts(sh, ctx, &ri, ns)?;
            let w = ops::update(sh, &ri, ns, name, t.sub, obj, &dups, &opts)?;
            written_response(&ri, ctx, w)
        }
        (&Method::PATCH, Some(name)) => {
            let pt = patch_type(&ctx.content_type)?;
            let raw = read_body(body).await?;
            let opts = write_opts(sh, ctx, &ri, ns)?;
            let w = ops::patch(sh, &ri, ns, name, t.sub, pt, &raw, &opts)?;
            written_response(&ri, ctx, w)
        }
        (&Method::DELETE, Some(name)) if t.sub == Sub::Main => {
            let raw = read_body(body).await?;
            let o = delete_opts(ctx, &raw)?;
            match ops::delete(sh, &ri, ns, name, &o)? {
                Deleted::Object(obj) => object_response(&ri, ctx, 200, &obj, &[]),
                Deleted::Status(s) => Ok(json_response(200, &s)),
            }
        }
        (&Method::DELETE, None) if t.sub == Sub::Main => {
            let raw = read_body(body).await?;
            let o = delete_opts(ctx, &raw)?;
            let p = list::ListParams::from_query(&ctx.query, &ri)?;
            let v = ops::delete_collection(sh, &ri, ns, &p.labels, &p.fields, &o)?;
            Ok(json_response(200, &v))
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({})",
            ctx.method
        ))),
    }
}

/// The DeleteOptions body: JSON (kubectl, kube-rs) or protobuf (client-go typed clients such as Helm's).
fn delete_body(content_type: &str, raw: &[u8]) -> ApiResult<Value> {
    let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if media != crate::protobuf::CONTENT_TYPE {
        return serde_json::from_slice(raw).map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")));
    }
    let v = crate::protobuf::decode(raw)?;
    if v["kind"] != "DeleteOptions" {
        return Err(ApiError::bad_request(format!(
            "invalid DeleteOptions: the protobuf body carries a {}",
            v["kind"].as_str().unwrap_or("")
        )));
    }
    Ok(v)
}

/// DeleteOptions from the body and the query.
fn delete_opts(ctx: &Ctx, raw: &[u8]) -> ApiResult<DeleteOpts> {
    let mut o = DeleteOpts::default();
    let trimmed = raw.iter().any(|b| !b.is_ascii_whitespace());
    if trimmed {
        let v = delete_body(&ctx.content_type, raw)?;
        o.propagation = v["propagationPolicy"].as_str().map(str::to_string);
        o.orphan_dependents = v["orphanDependents"].as_bool();
        o.grace_period_seconds = match &v["gracePeriodSeconds"] {
            Value::Null => None,
            g => Some(g.as_i64().ok_or_else(|| {
                ApiError::bad_request("invalid DeleteOptions: gracePeriodSeconds must be an integer")
            })?),
        };
        o.uid = v
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        o.resource_version = v
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        match &v["dryRun"] {
            Value::Array(a) if a.iter().any(|x| x.as_str() == Some("All")) => o.dry_run = true,
            Value::Array(a) if !a.is_empty() => return Err(ApiError::bad_request("dryRun: Unsupported value")),
            _ => {}
        }
    }
    if let Some(p) = ctx.query.non_empty("propagationPolicy") {
        o.propagation = Some(p.to_string());
    }
    if let Some(g) = ctx.query.non_empty("gracePeriodSeconds") {
        o.grace_period_seconds = Some(
            g.parse()
                .map_err(|_| ApiError::bad_request(format!("gracePeriodSeconds: invalid value {g:?}")))?,
        );
    }
    if ctx.query.get("orphanDependents").is_some() {
        o.orphan_dependents = Some(ctx.query.flag("orphanDependents")?);
    }
    match ctx.query.get("dryRun") {
        None | Some("") => {}
        Some("All") => o.dry_run = true,
        Some(other) => return Err(ApiError::bad_request(format!("dryRun: Unsupported value: \"{other}\""))),
    }
    Ok(o)
}
