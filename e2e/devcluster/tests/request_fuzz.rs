//! Property test: devcluster never panics on client input, and every error is a `Status`.
//!
//! Random requests (method, path, query string, Accept, Content-Type and body) go straight into the HTTP entry
//! point [`devcluster::server::handle`] in-process, without a network. Bodies mix arbitrary bytes, arbitrary
//! JSON, plausible objects with random extra fields, JSON patches and protobuf envelopes, so request decoding,
//! field validation, every patch type (JSON, merge, strategic, apply) and the protobuf decoder are all hit.
//! The properties checked for every request:
//! - a response is produced (no panic, no hang);
//! - every 4xx/5xx body is a `meta/v1 Status` with `status: Failure` and `code` equal to the HTTP status;
//! - every other non-streaming JSON body parses as JSON.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, Method, Request, Response};
use devcluster::server::{handle, Shared};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Map, Value};

const NS: &str = "fuzz";

/// Paths of objects that exist at the start of every case, plus collections and odd corners.
const PATHS: &[&str] = &[
    "/api/v1/namespaces/fuzz/configmaps",
    "/api/v1/namespaces/fuzz/configmaps/cm",
    "/api/v1/namespaces/fuzz/secrets/sec",
    "/api/v1/namespaces/fuzz/events/ev",
    "/apis/events.k8s.io/v1/namespaces/fuzz/events/ev",
    "/apis/events.k8s.io/v1/namespaces/fuzz/events",
    "/apis/apps/v1/namespaces/fuzz/deployments/dep",
    "/apis/apps/v1/namespaces/fuzz/deployments/dep/scale",
    "/apis/apps/v1/namespaces/fuzz/deployments/dep/status",
    "/apis/apps/v1/namespaces/fuzz/deployments",
    "/apis/fuzz.example.com/v1/namespaces/fuzz/widgets/w",
    "/apis/fuzz.example.com/v1/namespaces/fuzz/widgets/w/status",
    "/apis/fuzz.example.com/v1/namespaces/fuzz/widgets/w/scale",
    "/apis/fuzz.example.com/v1/namespaces/fuzz/widgets",
    "/apis/fuzz.example.com/v1/widgets",
    "/api/v1/namespaces",
    "/api/v1/namespaces/fuzz",
    "/api/v1/namespaces/fuzz/status",
    "/api/v1/configmaps",
    "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "/api",
    "/apis",
    "/api/v1",
    "/apis/apps",
    "/openapi/v3",
    "/openapi/v3/api/v1",
    "/version",
    "/healthz",
];

const CONTENT_TYPES: &[&str] = &[
    "",
    "application/json",
    "application/json; charset=utf-8",
    "application/yaml",
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
    "application/vnd.kubernetes.protobuf",
    "text/plain",
];

const ACCEPTS: &[&str] = &[
    "",
    "*/*",
    "application/json, */*",
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
    "application/vnd.kubernetes.protobuf,application/json",
    "application/vnd.kubernetes.protobuf",
    "text/html",
];

const QUERY_KEYS: &[&str] = &[
    "fieldValidation",
    "dryRun",
    "fieldManager",
    "force",
    "labelSelector",
    "fieldSelector",
    "limit",
    "continue",
    "resourceVersion",
    "resourceVersionMatch",
    "propagationPolicy",
    "gracePeriodSeconds",
    "orphanDependents",
    "includeObject",
];

const QUERY_VALUES: &[&str] = &[
    "",
    "Strict",
    "Warn",
    "Ignore",
    "All",
    "true",
    "false",
    "1",
    "-5",
    "0",
    "fuzzer",
    "Foreground",
    "Orphan",
    "Background",
    "NotOlderThan",
    "Exact",
    "Object",
    "None",
    "app%3Dx%2Ctier%21%3Dy",
    "a%20in%20(b,c)",
    "metadata.name%3Dcm",
    "involvedObject.name%3Dx",
    "spec.nodeName%3Dn",
    "%ZZ",
    "eyJydiI6MSwiaWQiOjEsIm9mZiI6MX0",
];

const KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "namespace",
    "generateName",
    "labels",
    "annotations",
    "finalizers",
    "ownerReferences",
    "managedFields",
    "resourceVersion",
    "uid",
    "deletionTimestamp",
    "spec",
    "status",
    "data",
    "stringData",
    "binaryData",
    "replicas",
    "selector",
    "matchLabels",
    "template",
    "containers",
    "image",
    "ports",
    "containerPort",
    "protocol",
    "size",
    "mode",
    "$patch",
    "$setElementOrder/containers",
    "$retainKeys",
    "$deleteFromPrimitiveList/finalizers",
    "regarding",
    "involvedObject",
    "note",
    "series",
    "count",
    "op",
    "path",
    "value",
    "from",
    "",
    "~1",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        select(QUERY_VALUES).prop_map(Value::from),
        "\\PC{0,10}".prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::vec((key(), inner), 0..6).prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<
                String,
                Value,
            >>(
            ))),
        ]
    })
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![4 => select(KEYS).prop_map(String::from), 1 => "\\PC{0,6}"]
}

/// A plausible object for one of the seeded kinds, with a random value at a random (possibly nested) key.
fn object_body() -> impl Strategy<Value = Vec<u8>> {
    let base = select(vec![
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "1"}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"}, "stringData": {"p": "x"}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "dep"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}},
                "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "ev"},
            "eventTime": "2026-11-22T01:27:18.721491Z", "reportingController": "fuzz", "reportingInstance": "fuzz",
            "action": "A", "reason": "R", "type": "Normal", "note": "n", "regarding": {"kind": "ConfigMap", "name": "cm"}}),
        json!({"apiVersion": "fuzz.example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 2}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fuzz"}}),
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "dep"}, "spec": {"replicas": 3}}),
    ]);
    (base, proptest::collection::vec(key(), 1..4), json_value()).prop_map(|(mut obj, path, value)| {
        insert_at(&mut obj, &path, value);
        serde_json::to_vec(&obj).unwrap_or_default()
    })
}

/// Set `value` at `path` (creating objects on the way, replacing whatever is not an object).
fn insert_at(obj: &mut Value, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for p in parents {
        if !cur.is_object() {
            *cur = json!({});
        }
        let Some(m) = cur.as_object_mut() else { return };
        cur = m.entry(p.clone()).or_insert_with(|| json!({}));
    }
    if !cur.is_object() {
        *cur = json!({});
    }
    if let Some(m) = cur.as_object_mut() {
        m.insert(last.clone(), value);
    }
}

fn json_patch_body() -> impl Strategy<Value = Vec<u8>> {
    let op = (
        select(vec!["add", "remove", "replace", "move", "copy", "test", "bogus"]),
        select(vec![
            "/metadata/finalizers",
            "/metadata/finalizers/0",
            "/metadata/finalizers/-",
            "/metadata/managedFields",
            "/metadata/resourceVersion",
            "/metadata/name",
            "/data/a",
            "/spec/replicas",
            "/spec/template/spec/containers/0/image",
            "/status",
            "",
            "/",
            "/~2",
            "/a/b/c",
            "no-slash",
        ]),
        json_value(),
        select(vec!["/data/a", "/metadata", "", "/x"]),
    )
        .prop_map(|(op, path, value, from)| json!({"op": op, "path": path, "value": value, "from": from}));
    proptest::collection::vec(op, 0..5).prop_map(|ops| serde_json::to_vec(&ops).unwrap_or_default())
}

/// A protobuf envelope (`k8s\0` magic) around random bytes, or around a well-formed `runtime.Unknown` whose raw
/// object bytes are random.
fn protobuf_body() -> impl Strategy<Value = Vec<u8>> {
    let raw = proptest::collection::vec(any::<u8>(), 0..64);
    (
        select(vec!["v1", "apps/v1", ""]),
        select(vec!["ConfigMap", "Secret", "Namespace", "Pod", ""]),
        raw,
    )
        .prop_map(|(api_version, kind, raw)| {
            let mut type_meta = Vec::new();
            push_field(&mut type_meta, 1, api_version.as_bytes());
            push_field(&mut type_meta, 2, kind.as_bytes());
            let mut out = b"k8s\0".to_vec();
            push_field(&mut out, 1, &type_meta);
            push_field(&mut out, 2, &raw);
            out
        })
}

/// A length-delimited protobuf field (lengths < 128 only, which is all this generator produces).
fn push_field(out: &mut Vec<u8>, number: u8, bytes: &[u8]) {
    out.push((number << 3) | 2);
    out.push(bytes.len().min(127) as u8);
    out.extend_from_slice(&bytes[..bytes.len().min(127)]);
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => Just(Vec::new()),
        2 => proptest::collection::vec(any::<u8>(), 0..128),
        3 => json_value().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        5 => object_body(),
        3 => json_patch_body(),
        1 => protobuf_body(),
        1 => "\\PC{0,40}".prop_map(String::into_bytes),
    ]
}

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => select(PATHS).prop_map(String::from),
        1 => (select(PATHS), "[a-z0-9.-]{0,12}").prop_map(|(p, s)| format!("{p}/{s}")),
        1 => proptest::collection::vec("[a-zA-Z0-9._~-]{0,10}", 0..7)
            .prop_map(|segs| format!("/{}", segs.join("/"))),
    ]
}

fn query() -> impl Strategy<Value = String> {
    let pair = (
        select(QUERY_KEYS),
        prop_oneof![3 => select(QUERY_VALUES).prop_map(String::from), 1 => "[a-zA-Z0-9=,!()%.-]{0,12}"],
    );
    (any::<bool>(), proptest::collection::vec(pair, 0..5)).prop_map(|(lead, pairs)| {
        let joined: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{}{}", if lead { "&" } else { "" }, joined.join("&"))
    })
}

#[derive(Debug, Clone)]
struct Input {
    method: Method,
    path: String,
    query: String,
    content_type: &'static str,
    accept: &'static str,
    body: Vec<u8>,
}

/// Anything goes: random method, path, query, media types and body.
fn chaos() -> impl Strategy<Value = Input> {
    let method = select(vec![
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
    ]);
    (method, path(), query(), select(CONTENT_TYPES), select(ACCEPTS), body()).prop_map(
        |(method, path, query, content_type, accept, body)| Input {
            method,
            path,
            query,
            content_type,
            accept,
            body,
        },
    )
}

/// (object path, collection path, a valid object) of every seeded object.
fn targets() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            "/api/v1/namespaces/fuzz/configmaps/cm",
            "/api/v1/namespaces/fuzz/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "1"}}),
        ),
        (
            "/api/v1/namespaces/fuzz/secrets/sec",
            "/api/v1/namespaces/fuzz/secrets",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"}, "stringData": {"p": "x"}}),
        ),
        (
            "/apis/apps/v1/namespaces/fuzz/deployments/dep",
            "/apis/apps/v1/namespaces/fuzz/deployments",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "dep"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}},
                    "template": {"metadata": {"labels": {"app": "x"}},
                        "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]}}}}),
        ),
        (
            "/apis/events.k8s.io/v1/namespaces/fuzz/events/ev",
            "/apis/events.k8s.io/v1/namespaces/fuzz/events",
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "ev"},
                "eventTime": "2026-11-22T01:27:18.721491Z", "reportingController": "fuzz", "reportingInstance": "fuzz",
                "action": "A", "reason": "R", "type": "Normal", "note": "n",
                "regarding": {"kind": "ConfigMap", "name": "cm"}, "series": {"count": 2, "lastObservedTime": "2026-11-22T01:27:19.000000Z"}}),
        ),
        (
            "/api/v1/namespaces/fuzz/events/ev",
            "/api/v1/namespaces/fuzz/events",
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "ev"}, "message": "m", "count": 3,
                "involvedObject": {"kind": "ConfigMap", "name": "cm"}, "source": {"component": "fuzz"}}),
        ),
        (
            "/apis/fuzz.example.com/v1/namespaces/fuzz/widgets/w",
            "/apis/fuzz.example.com/v1/namespaces/fuzz/widgets",
            json!({"apiVersion": "fuzz.example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
                "spec": {"size": 2, "items": [{"name": "a"}]}}),
        ),
    ]
}

/// Mutate a valid object: random values at random (mostly known) keys, or a random key removed.
fn mutated(obj: Value) -> impl Strategy<Value = Value> {
    (
        proptest::collection::vec((proptest::collection::vec(key(), 1..4), json_value()), 0..3),
        any::<bool>(),
    )
        .prop_map(move |(edits, strip_meta)| {
            let mut o = obj.clone();
            for (path, value) in edits {
                insert_at(&mut o, &path, value);
            }
            if strip_meta {
                if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("namespace");
                }
            }
            o
        })
}

fn valid_query(apply: bool) -> impl Strategy<Value = String> {
    let validation = select(vec![
        "",
        "fieldValidation=Strict",
        "fieldValidation=Warn",
        "fieldValidation=Ignore",
    ]);
    let dry_run = select(vec!["", "", "dryRun=All"]);
    let manager = select(vec![
        "",
        "fieldManager=fuzz-a",
        "fieldManager=fuzz-b",
        "fieldManager=kubectl",
    ]);
    let force = select(if apply {
        vec!["", "force=true", "force=false"]
    } else {
        vec![""]
    });
    let delete = select(vec![
        "",
        "propagationPolicy=Foreground",
        "propagationPolicy=Orphan",
        "gracePeriodSeconds=0",
    ]);
    (validation, dry_run, manager, force, delete).prop_map(|(a, b, c, d, e)| {
        let parts: Vec<&str> = [a, b, c, d, e].into_iter().filter(|p| !p.is_empty()).collect();
        format!("&{}", parts.join("&"))
    })
}

/// Well-formed requests against the seeded objects, so that writes get past decoding and exercise
/// validation, every patch type, SSA, subresources, deletion and the GC.
fn coherent() -> impl Strategy<Value = Input> {
    select(targets()).prop_flat_map(|(obj_path, coll_path, obj)| {
        let verb = select(vec![
            "create",
            "update",
            "merge",
            "strategic",
            "json",
            "apply",
            "delete",
            "get",
            "list",
        ]);
        (
            verb,
            mutated(obj),
            json_value(),
            json_patch_body(),
            valid_query(true),
            select(ACCEPTS),
        )
            .prop_map(move |(verb, obj, partial, json_patch, query, accept)| {
                let (method, path, content_type, body) = match verb {
                    "create" => (Method::POST, coll_path, "application/json", to_vec(&obj)),
                    "update" => (Method::PUT, obj_path, "application/json", to_vec(&obj)),
                    "merge" => (
                        Method::PATCH,
                        obj_path,
                        "application/merge-patch+json",
                        to_vec(&partial),
                    ),
                    "strategic" => (
                        Method::PATCH,
                        obj_path,
                        "application/strategic-merge-patch+json",
                        to_vec(&obj),
                    ),
                    "json" => (Method::PATCH, obj_path, "application/json-patch+json", json_patch),
                    "apply" => (Method::PATCH, obj_path, "application/apply-patch+yaml", to_vec(&obj)),
                    "delete" => (Method::DELETE, obj_path, "application/json", Vec::new()),
                    "get" => (Method::GET, obj_path, "", Vec::new()),
                    _ => (Method::GET, coll_path, "", Vec::new()),
                };
                Input {
                    method,
                    path: path.to_string(),
                    query,
                    content_type,
                    accept,
                    body,
                }
            })
    })
}

fn to_vec(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![2 => coherent(), 1 => chaos()]
}

fn request(i: &Input) -> Option<Request<Body>> {
    let uri = if i.query.is_empty() {
        i.path.clone()
    } else {
        format!("{}?{}", i.path, i.query)
    };
    let mut b = Request::builder().method(i.method.clone()).uri(uri);
    if !i.content_type.is_empty() {
        b = b.header(header::CONTENT_TYPE, i.content_type);
    }
    if !i.accept.is_empty() {
        b = b.header(header::ACCEPT, i.accept);
    }
    b.body(Body::from(i.body.clone())).ok()
}

/// Every request runs as the cluster admin, so the fuzzing reaches the handlers rather than RBAC.
async fn send(sh: &Arc<Shared>, mut req: Request<Body>) -> Response<Body> {
    let bearer = format!("Bearer {}", sh.auth.admin_token());
    if let Ok(v) = header::HeaderValue::from_str(&bearer) {
        req.headers_mut().insert(header::AUTHORIZATION, v);
    }
    handle(State(sh.clone()), req).await
}

async fn body_bytes(resp: Response<Body>) -> Vec<u8> {
    axum::body::to_bytes(resp.into_body(), 64 << 20)
        .await
        .map(|b| b.to_vec())
        .unwrap_or_default()
}

async fn post(sh: &Arc<Shared>, path: &str, obj: Value) -> u16 {
    let req = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(&obj).unwrap_or_default()))
        .expect("a valid request");
    send(sh, req).await.status().as_u16()
}

/// Make sure the objects the generated paths name exist (a previous case may have deleted them).
async fn seed(sh: &Arc<Shared>) {
    post(sh, "/api/v1/namespaces", json!({"metadata": {"name": NS}})).await;
    post(
        sh,
        "/api/v1/namespaces/fuzz/configmaps",
        json!({"metadata": {"name": "cm"}, "data": {"a": "1"}}),
    )
    .await;
    post(
        sh,
        "/api/v1/namespaces/fuzz/secrets",
        json!({"metadata": {"name": "sec"}, "data": {"a": "eA=="}}),
    )
    .await;
    post(
        sh,
        "/apis/events.k8s.io/v1/namespaces/fuzz/events",
        json!({"metadata": {"name": "ev"}, "eventTime": "2026-11-22T01:27:18.721491Z", "reportingController": "c",
            "reportingInstance": "i", "action": "A", "reason": "R", "type": "Normal",
            "regarding": {"kind": "ConfigMap", "name": "cm", "namespace": NS}}),
    )
    .await;
    post(
        sh,
        "/apis/apps/v1/namespaces/fuzz/deployments",
        json!({"metadata": {"name": "dep"}, "spec": {"selector": {"matchLabels": {"app": "x"}},
            "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
    )
    .await;
    post(
        sh,
        "/apis/fuzz.example.com/v1/namespaces/fuzz/widgets",
        json!({"apiVersion": "fuzz.example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}}),
    )
    .await;
}

fn widget_crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.fuzz.example.com"},
        "spec": {"group": "fuzz.example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "integer", "minimum": 0, "default": 1},
                        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                        "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                            "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}}},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}})
}

/// Create the CRD and wait until its resources are served (the CRD controller runs asynchronously).
async fn install_crd(sh: &Arc<Shared>) {
    let code = post(
        sh,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        widget_crd(),
    )
    .await;
    assert_eq!(code, 201, "the fuzz CRD is created");
    for _ in 0..600 {
        if sh.registry.read().find("fuzz.example.com", "v1", "widgets").is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the fuzz CRD never became established");
}

fn is_watch(i: &Input) -> bool {
    i.query.split('&').any(|kv| kv.starts_with("watch")) || i.path.split('/').any(|s| s == "watch")
}

/// Check one response against the properties of the module doc.
async fn check(i: &Input, resp: Response<Body>) -> Result<(), TestCaseError> {
    let code = resp.status().as_u16();
    prop_assert!((200..600).contains(&code), "status {code}");
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if code < 400 && (is_watch(i) || !content_type.starts_with("application/json")) {
        return Ok(());
    }
    let bytes = body_bytes(resp).await;
    let parsed: Result<Value, _> = serde_json::from_slice(&bytes);
    prop_assert!(
        parsed.is_ok(),
        "{code} body is not JSON: {}",
        String::from_utf8_lossy(&bytes)
    );
    let v = parsed.unwrap_or_default();
    if code >= 400 {
        prop_assert_eq!(&v["kind"], "Status", "{} body: {}", code, v);
        prop_assert_eq!(&v["apiVersion"], "v1");
        prop_assert_eq!(&v["status"], "Failure");
        prop_assert_eq!(v["code"].as_u64(), Some(u64::from(code)), "{}", v);
        prop_assert!(v["message"].is_string(), "{}", v);
    }
    Ok(())
}

#[test]
fn random_requests_always_get_a_response_and_errors_are_statuses() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let addr = "127.0.0.1:0".parse().expect("an address");
    let sh = Arc::new(Shared::new(addr, "32".into(), Duration::from_secs(60), 1000));
    rt.block_on(async {
        devcluster::controllers::start(&sh);
        install_crd(&sh).await;
    });
    let cases = std::env::var("DEVCLUSTER_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&input(), |i| {
        let Some(req) = request(&i) else {
            return Ok(()); // not a valid HTTP request at all: nothing reaches devcluster
        };
        rt.block_on(async {
            seed(&sh).await;
            let resp = tokio::time::timeout(Duration::from_secs(60), send(&sh, req))
                .await
                .map_err(|_| TestCaseError::fail(format!("no response within 60 s: {i:?}")))?;
            if std::env::var_os("DEVCLUSTER_FUZZ_TRACE").is_some() {
                eprintln!(
                    "{} {} {}?{} [{}]",
                    resp.status(),
                    i.method,
                    i.path,
                    i.query,
                    i.content_type
                );
            }
            check(&i, resp).await
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
