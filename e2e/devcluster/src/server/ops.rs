//! The verbs as plain synchronous functions over decoded values: create, update,
//! patch, apply, delete, deletecollection and the scale/status subresources. The HTTP layer and the built-in
//! controllers both call these, so a controller write behaves exactly like a client write (managedFields,
//! no-op detection, finalizer rules, events).
//!
//! Every read-modify-write computes the new object outside the store lock and commits with a
//! compare-and-swap on the resourceVersion it read; a lost race recomputes (see [`retry`]).

use std::sync::Arc;

use chrono::{SecondsFormat, Utc};
use rand::Rng;
use serde_json::{json, Map, Value};

use crate::crdschema::CrdSchema;
use crate::error::{ApiError, ApiResult, Cause};
use crate::registry::ResourceInfo;
use crate::schema::{Builtin, FieldSchema};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{rv_of, CommitError, ObjRef, Write};
use crate::{defaults, events, patch, ssa, validation};

use super::Shared;

/// Which part of an object a request addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sub {
    Main,
    Status,
    Scale,
}

impl Sub {
    pub fn name(self) -> Option<&'static str> {
        match self {
            Sub::Main => None,
            Sub::Status => Some("status"),
            Sub::Scale => Some("scale"),
        }
    }
}

/// `fieldValidation`; absent means Warn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    Strict,
    Warn,
    Ignore,
}

impl FieldValidation {
    pub fn parse(v: Option<&str>) -> ApiResult<Self> {
        match v.unwrap_or("") {
            "" | "Warn" => Ok(FieldValidation::Warn),
            "Strict" => Ok(FieldValidation::Strict),
            "Ignore" => Ok(FieldValidation::Ignore),
            other => Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: \"{other}\": supported values: \"Ignore\", \"Strict\", \"Warn\""
            ))),
        }
    }
}

/// A last check on a write, with the stored object (`None` for a create) and the object about to be
/// committed; the HTTP layer uses it for RBAC escalation checks, which need the final object of a patch.
#[derive(Clone)]
pub struct Admit(pub Arc<AdmitFn>);

/// The check itself: `(stored, new)`.
pub type AdmitFn = dyn Fn(Option<&Value>, &Value) -> ApiResult<()> + Send + Sync;

impl std::fmt::Debug for Admit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Admit")
    }
}

/// Options shared by all writes.
#[derive(Debug, Clone)]
pub struct WriteOpts {
    pub dry_run: bool,
    /// The manager for Update entries (fieldManager or the User-Agent prefix or "unknown").
    pub manager: String,
    /// The explicit `fieldManager` parameter (apply requires it).
    pub field_manager: Option<String>,
    pub validation: FieldValidation,
    pub force: bool,
    /// Admission check run before the commit (never on no-op writes).
    pub admit: Option<Admit>,
}

impl WriteOpts {
    /// Options for writes made by the built-in controllers.
    pub fn system(manager: &str) -> Self {
        WriteOpts {
            dry_run: false,
            manager: manager.to_string(),
            field_manager: Some(manager.to_string()),
            validation: FieldValidation::Ignore,
            force: false,
            admit: None,
        }
    }

    fn admit(&self, old: Option<&Value>, new: &Value) -> ApiResult<()> {
        match &self.admit {
            Some(a) => (a.0)(old, new),
            None => Ok(()),
        }
    }
}

/// A successful write.
#[derive(Debug)]
pub struct Written {
    pub object: Value,
    pub created: bool,
    pub warnings: Vec<String>,
}

/// The answer to a delete.
#[derive(Debug)]
pub enum Deleted {
    Object(Value),
    Status(Value),
}

/// Patch content types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

/// DeleteOptions from the body and/or the query.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    pub propagation: Option<String>,
    pub dry_run: bool,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub orphan_dependents: Option<bool>,
    /// `gracePeriodSeconds` (kubectl `--grace-period`, `--now`, `--force`). Only Pods delete gracefully, as in
    /// a real cluster: see [`pod_grace_period`]; every other kind is deleted (or marked for deletion when
    /// finalizers remain) at once.
    pub grace_period_seconds: Option<i64>,
}

/// Errors inside a read-modify-write attempt.
pub enum OpError {
    Api(ApiError),
    Stale,
}

impl From<ApiError> for OpError {
    fn from(e: ApiError) -> Self {
        OpError::Api(e)
    }
}

type OpResult<T> = Result<T, OpError>;

/// Run a read-modify-write until it commits without a race.
pub fn retry<T>(ri: &ResourceInfo, name: &str, mut f: impl FnMut() -> OpResult<T>) -> ApiResult<T> {
    for _ in 0..64 {
        match f() {
            Ok(v) => return Ok(v),
            Err(OpError::Api(e)) => return Err(e),
            Err(OpError::Stale) => continue,
        }
    }
    Err(ApiError::conflict(&ri.plural, &ri.group, name))
}

pub const ANN_LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
const GEN_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const FINALIZER_ORPHAN: &str = "orphan";
const FINALIZER_FOREGROUND: &str = "foregroundDeletion";
pub const FINALIZER_CRD_CLEANUP: &str = "customresourcecleanup.apiextensions.k8s.io";

/// RFC 3339 UTC to the second.
pub fn now_secs() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

pub fn obj_ref(ri: &ResourceInfo, ns: Option<&str>, name: &str) -> ObjRef {
    ObjRef {
        res: ri.key.clone(),
        ns: if ri.namespaced {
            ns.unwrap_or("").to_string()
        } else {
            String::new()
        },
        name: name.to_string(),
    }
}

/// The field-merge schema of a resource.
pub enum SchemaRef<'a> {
    Crd(&'a CrdSchema),
    Builtin(Builtin),
    Opaque,
}

impl SchemaRef<'_> {
    pub fn as_dyn(&self) -> &dyn FieldSchema {
        match self {
            SchemaRef::Crd(s) => *s,
            SchemaRef::Builtin(b) => b,
            SchemaRef::Opaque => &crate::schema::Opaque,
        }
    }
}

pub fn schema_of(ri: &ResourceInfo) -> SchemaRef<'_> {
    match &ri.custom {
        Some(c) => match &c.schema {
            Some(s) => SchemaRef::Crd(s),
            None => SchemaRef::Opaque,
        },
        None => SchemaRef::Builtin(Builtin::new(&ri.kind)),
    }
}

pub fn meta(obj: &Value) -> &Value {
    &obj["metadata"]
}

pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let Value::Object(root) = obj else {
        unreachable!("just made an object")
    };
    let entry = root.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    match entry {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

pub fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

pub fn set_finalizers(obj: &mut Value, f: &[String]) {
    let m = meta_mut(obj);
    if f.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert("finalizers".into(), json!(f));
    }
}

pub fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null())
}

/// Map a commit refusal to the client-visible error.
fn commit_err(ri: &ResourceInfo, r: &ObjRef, e: CommitError) -> OpError {
    match e {
        CommitError::Stale => OpError::Stale,
        CommitError::Unavailable(detail) => OpError::Api(ApiError::storage_unavailable(detail)),
        CommitError::AlreadyExists => OpError::Api(ApiError::already_exists(&ri.plural, &ri.group, &r.name)),
        CommitError::NamespaceMissing => OpError::Api(ApiError::not_found("namespaces", "", &r.ns)),
        CommitError::NamespaceTerminating => OpError::Api(
            ApiError::forbidden(format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {} because it is being terminated",
                crate::error::qualified(&ri.plural, &ri.group),
                r.name,
                r.ns
            ))
            .with_details(&ri.plural, &ri.group, &r.name)
            .with_causes(vec![Cause::new(
                "NamespaceTerminating",
                format!("namespace {} is being terminated", r.ns),
                "metadata.namespace",
            )]),
        ),
    }
}

/// Whether `ri` is the events.k8s.io/v1 view of the core/v1 Event storage (see `events.rs`).
fn is_events_v1_resource(ri: &ResourceInfo) -> bool {
    ri.group == "events.k8s.io" && ri.plural == "events" && !ri.is_custom()
}

fn is_core_event_resource(ri: &ResourceInfo) -> bool {
    ri.group.is_empty() && ri.plural == "events"
}

/// Output form of a stored object for this endpoint: CR versions share storage (apiVersion rewritten, and
/// schema defaults applied, as the real server does when it decodes an object read from etcd), and
/// events.k8s.io/v1 Events are converted from the core/v1 storage shape.
pub fn for_version(ri: &ResourceInfo, obj: &Value) -> Value {
    if is_events_v1_resource(ri) {
        return events::to_events_v1(obj);
    }
    if is_core_event_resource(ri) {
        return events::to_core(obj.clone());
    }
    let mut out = obj.clone();
    if let Some(c) = &ri.custom {
        if out["apiVersion"].as_str() != Some(ri.api_version().as_str()) {
            out["apiVersion"] = json!(ri.api_version());
        }
        if let Some(s) = c.schema.as_ref().filter(|s| s.has_defaults()) {
            s.default(&mut out);
        }
    }
    out
}

/// Whether [`for_version`] would change a stored object (otherwise it can be served as is, without a copy).
pub fn needs_version_fix(ri: &ResourceInfo, obj: &Value) -> bool {
    if is_events_v1_resource(ri) {
        return !events::is_events_v1(obj);
    }
    if is_core_event_resource(ri) {
        return events::is_events_v1(obj);
    }
    match &ri.custom {
        Some(c) => {
            obj["apiVersion"].as_str() != Some(ri.api_version().as_str())
                || c.schema.as_ref().is_some_and(|s| s.has_defaults())
        }
        None => false,
    }
}

/// A stored object as this endpoint serves it, copied only when it has to change.
pub fn shaped(ri: &ResourceInfo, obj: Arc<Value>) -> Arc<Value> {
    if needs_version_fix(ri, &obj) {
        Arc::new(for_version(ri, &obj))
    } else {
        obj
    }
}

/// The storage shape of an object written through `ri` (events.k8s.io Events are stored as core/v1 ones).
pub fn to_storage(ri: &ResourceInfo, obj: Value) -> Value {
    if is_events_v1_resource(ri) {
        events::to_core(obj)
    } else {
        obj
    }
}

// ------------------------------------------------------------------------------------------------------------
// Decoding and checks

/// Decode a create/update body by Content-Type. Returns the object and duplicate-key paths.
pub fn decode_body(content_type: &str, body: &[u8]) -> ApiResult<(Value, Vec<String>)> {
    let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match media.as_str() {
        "application/json" | "" => {
            let v: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("the object provided is unrecognized: {e}")))?;
            Ok((v, validation::duplicate_json_keys(body)))
        }
        "application/yaml" => Ok((parse_yaml_or_json(body)?, Vec::new())),
        crate::protobuf::CONTENT_TYPE => Ok((crate::protobuf::decode(body)?, Vec::new())),
        other => Err(unsupported_body(other)),
    }
}

pub fn unsupported_body(media: &str) -> ApiError {
    ApiError::unsupported_media_type(format!(
        "the body of the request was in an unknown format ({media}) - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
    ))
}

/// Parse an apply body: JSON first (what both clients send), then YAML 1.2.
pub fn parse_yaml_or_json(body: &[u8]) -> ApiResult<Value> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    let text = std::str::from_utf8(body).map_err(|_| ApiError::bad_request("the request body is not valid UTF-8"))?;
    serde_saphyr::from_str::<Value>(text).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

fn require_object(v: &Value) -> ApiResult<()> {
    if v.is_object() {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "the object provided is unrecognized: expected a JSON object",
        ))
    }
}

/// The body's apiVersion/kind must match the endpoint; missing ones are filled in.
fn check_type(ri: &ResourceInfo, obj: &mut Value, required: bool) -> ApiResult<()> {
    require_object(obj)?;
    let expected = ri.api_version();
    match obj.get("apiVersion").and_then(Value::as_str) {
        Some(v) if !v.is_empty() && v != expected => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({expected})"
            )))
        }
        Some(v) if !v.is_empty() => {}
        _ if required => return Err(ApiError::bad_request("apiVersion must be set")),
        _ => obj["apiVersion"] = json!(expected),
    }
    match obj.get("kind").and_then(Value::as_str) {
        Some(k) if !k.is_empty() && k != ri.kind => Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            ri.kind
        ))),
        Some(k) if !k.is_empty() => Ok(()),
        _ if required => Err(ApiError::bad_request("kind must be set")),
        _ => {
            obj["kind"] = json!(ri.kind);
            Ok(())
        }
    }
}

/// Namespace in the body must match the URL (filled in when empty); cluster-scoped bodies lose it.
fn check_namespace(ri: &ResourceInfo, obj: &mut Value, ns: Option<&str>) -> ApiResult<()> {
    let m = meta_mut(obj);
    if !ri.namespaced {
        m.remove("namespace");
        return Ok(());
    }
    let url_ns = ns.unwrap_or("");
    match m.get("namespace").and_then(Value::as_str) {
        Some(b) if !b.is_empty() && b != url_ns => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        _ => {
            m.insert("namespace".into(), json!(url_ns));
            Ok(())
        }
    }
}

/// The body's name must match the URL name (PUT/PATCH); an empty one is filled in.
fn check_name(obj: &mut Value, name: &str) -> ApiResult<()> {
    let m = meta_mut(obj);
    match m.get("name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() && n != name => Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        ))),
        _ => {
            m.insert("name".into(), json!(name));
            Ok(())
        }
    }
}

/// Unknown fields and duplicate keys per fieldValidation. Unknown fields are removed in every mode:
/// CRs by structural pruning, built-ins because the real server decodes them into typed structs.
fn field_validation(
    ri: &ResourceInfo,
    obj: &mut Value,
    dups: &[String],
    mode: FieldValidation,
) -> ApiResult<Vec<String>> {
    let unknown = match &ri.custom {
        Some(c) => c.schema.as_ref().map(|s| s.prune(obj)).unwrap_or_default(),
        None => validation::prune_unknown_builtin_fields(obj),
    };
    let mut msgs: Vec<String> = unknown
        .iter()
        .map(|p| format!("unknown field \"{}\"", p.trim_start_matches('.')))
        .collect();
    msgs.extend(
        dups.iter()
            .map(|p| format!("duplicate field \"{}\"", p.trim_start_matches('.'))),
    );
    match mode {
        FieldValidation::Strict if !msgs.is_empty() => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            msgs.join(", ")
        ))),
        FieldValidation::Warn => Ok(msgs),
        _ => Ok(Vec::new()),
    }
}

fn generate_name(prefix: &str) -> String {
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| GEN_ALPHABET[rng.random_range(0..GEN_ALPHABET.len())] as char)
        .collect();
    format!("{prefix}{suffix}")
}

/// Defaulting for built-ins, schema defaults for CRs.
fn default_object(ri: &ResourceInfo, obj: &mut Value) {
    match &ri.custom {
        Some(c) => {
            if let Some(s) = &c.schema {
                s.default(obj);
            }
        }
        None => defaults::apply_defaults(obj),
    }
}

/// Schema validation (CRs) and CRD validation.
fn validate_object(ri: &ResourceInfo, obj: &Value) -> ApiResult<()> {
    let causes = match &ri.custom {
        Some(c) => c.schema.as_ref().map(|s| s.validate(obj)).unwrap_or_default(),
        None if ri.kind == "CustomResourceDefinition" => validation::validate_crd(obj),
        None => Vec::new(),
    };
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(&ri.kind, &ri.group, name_of(obj), causes))
    }
}

/// Whether anything outside metadata (and status, unless status counts as spec) differs.
fn spec_changed(ri: &ResourceInfo, old: &Value, new: &Value) -> bool {
    let status_is_spec = ri.is_custom() && !ri.status;
    let skip = |k: &str| k == "metadata" || (k == "status" && !status_is_spec) || k == "apiVersion" || k == "kind";
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return old != new;
    };
    let keys = o.keys().chain(n.keys()).filter(|k| !skip(k));
    for k in keys {
        if o.get(k) != n.get(k) {
            return true;
        }
    }
    false
}

fn bump_generation(obj: &mut Value) {
    let g = obj.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
    meta_mut(obj).insert("generation".into(), json!(g + 1));
}

/// Equality ignoring managedFields `time` (no-op detection).
pub fn same_object(a: &Value, b: &Value) -> bool {
    if a == b {
        return true;
    }
    let (Some(ao), Some(bo)) = (a.as_object(), b.as_object()) else {
        return false;
    };
    if ao.len() != bo.len() {
        return false;
    }
    for (k, av) in ao {
        let Some(bv) = bo.get(k) else { return false };
        if k == "metadata" {
            if !same_meta(av, bv) {
                return false;
            }
        } else if av != bv {
            return false;
        }
    }
    true
}

fn same_meta(a: &Value, b: &Value) -> bool {
    let (Some(ao), Some(bo)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    if ao.len() != bo.len() {
        return false;
    }
    for (k, av) in ao {
        let Some(bv) = bo.get(k) else { return false };
        if k == "managedFields" {
            let strip = |v: &Value| -> Value {
                let mut v = v.clone();
                if let Some(arr) = v.as_array_mut() {
                    for e in arr {
                        if let Some(m) = e.as_object_mut() {
                            m.remove("time");
                        }
                    }
                }
                v
            };
            if av != bv && strip(av) != strip(bv) {
                return false;
            }
        } else if av != bv {
            return false;
        }
    }
    true
}

// ------------------------------------------------------------------------------------------------------------
// Create

/// Server-owned metadata of a new object, plus per-kind create rules.
fn prepare_new(ri: &ResourceInfo, obj: &mut Value) {
    let m = meta_mut(obj);
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
        "generation",
    ] {
        m.remove(k);
    }
    m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    m.insert("creationTimestamp".into(), json!(now_secs()));
    if ri.generation {
        m.insert("generation".into(), json!(1));
    }
    if ri.key.as_ref() == crate::store::NAMESPACES {
        if !obj.pointer("/spec/finalizers").is_some_and(Value::is_array) {
            if !obj.get("spec").is_some_and(Value::is_object) {
                obj["spec"] = json!({});
            }
            obj["spec"]["finalizers"] = json!(["kubernetes"]);
        }
        obj["status"] = json!({"phase": "Active"});
    } else if ri.status {
        if let Some(o) = obj.as_object_mut() {
            o.remove("status");
        }
    }
}

/// Name and generateName.
fn assign_name(ri: &ResourceInfo, obj: &mut Value) -> ApiResult<String> {
    let m = meta_mut(obj);
    let mut name = m.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    if name.is_empty() {
        let gen = m.get("generateName").and_then(Value::as_str).unwrap_or("").to_string();
        if gen.is_empty() {
            return Err(ApiError::invalid(
                &ri.kind,
                &ri.group,
                "",
                vec![Cause::new(
                    "FieldValueRequired",
                    "Required value: name or generateName is required",
                    "metadata.name",
                )],
            ));
        }
        name = generate_name(&gen);
        m.insert("name".into(), json!(name));
    }
    let causes = validation::validate_name(&ri.kind, &name);
    if !causes.is_empty() {
        return Err(ApiError::invalid(&ri.kind, &ri.group, &name, causes));
    }
    Ok(name)
}

/// Storage key of CustomResourceDefinitions.
const CRD_KEY: &str = "apiextensions.k8s.io/customresourcedefinitions";

/// New custom resources are refused while their CRD is being deleted, as the apiextensions-apiserver does
/// (405 `create not allowed while custom resource definition is terminating`); otherwise the CRD cleanup could
/// race with creators forever. Apply-creates are refused too, since they create the same way.
fn check_crd_not_terminating(sh: &Shared, ri: &ResourceInfo) -> ApiResult<()> {
    let Some(c) = &ri.custom else { return Ok(()) };
    let key: crate::registry::ResKey = Arc::from(CRD_KEY);
    match sh.store.get(&key, "", &c.crd_name) {
        Some(crd) if is_deleting(&crd) => Err(ApiError::method_not_allowed(
            "create not allowed while custom resource definition is terminating",
        )
        .with_details(&ri.plural, &ri.group, "")),
        _ => Ok(()),
    }
}

/// POST: create an object (201).
pub fn create(
    sh: &Shared,
    ri: &ResourceInfo,
    ns: Option<&str>,
    mut obj: Value,
    dups: &[String],
    opts: &WriteOpts,
) -> ApiResult<Written> {
    check_type(ri, &mut obj, false)?;
    check_namespace(ri, &mut obj, ns)?;
    check_crd_not_terminating(sh, ri)?;
    let name = assign_name(ri, &mut obj)?;
    let warnings = field_validation(ri, &mut obj, dups, opts.validation)?;
    prepare_new(ri, &mut obj);
    default_object(ri, &mut obj);
    validate_object(ri, &obj)?;
    let schema = schema_of(ri);
    ssa::record_update(
        None,
        &mut obj,
        &opts.manager,
        None,
        &ri.api_version(),
        schema.as_dyn(),
        &now_secs(),
    )?;
    opts.admit(None, &obj)?;
    let object = commit_create(sh, ri, ns, &name, obj, opts.dry_run)?;
    Ok(Written {
        object,
        created: true,
        warnings,
    })
}

fn commit_create(
    sh: &Shared,
    ri: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    obj: Value,
    dry_run: bool,
) -> ApiResult<Value> {
    let r = obj_ref(ri, ns, name);
    let refused = |e| match commit_err(ri, &r, e) {
        OpError::Api(e) => e,
        OpError::Stale => ApiError::conflict(&ri.plural, &ri.group, name),
    };
    if dry_run {
        let exists = sh.store.get(&r.res, &r.ns, &r.name).is_some();
        if exists {
            return Err(ApiError::already_exists(&ri.plural, &ri.group, name));
        }
        if ri.namespaced {
            sh.store.check_namespace(&r.ns).map_err(refused)?;
        }
        return Ok(obj);
    }
    let ns_check = if ri.namespaced { Some(r.ns.as_str()) } else { None };
    match sh.store.commit(&r, None, Write::Put(to_storage(ri, obj)), ns_check) {
        Ok(v) => Ok((*v).clone()),
        Err(e) => Err(refused(e)),
    }
}

// ------------------------------------------------------------------------------------------------------------
// Update core

/// Keep only what a subresource write may change.
fn mask(ri: &ResourceInfo, sub: Sub, old: &Value, mut new: Value) -> Value {
    match sub {
        Sub::Status => {
            let mut out = old.clone();
            match new.get("status") {
                Some(s) => out["status"] = s.clone(),
                None => {
                    if let Some(o) = out.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            if let Some(mf) = new.pointer("/metadata/managedFields") {
                meta_mut(&mut out).insert("managedFields".into(), mf.clone());
            }
            out
        }
        Sub::Main | Sub::Scale if ri.status => {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(o) = new.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            new
        }
        _ => new,
    }
}

/// Copy immutable and server-owned metadata from the stored object.
fn keep_server_metadata(old: &Value, new: &mut Value) {
    let om = old["metadata"].as_object().cloned().unwrap_or_default();
    let nm = meta_mut(new);
    for k in [
        "uid",
        "creationTimestamp",
        "name",
        "namespace",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
    ] {
        match om.get(k) {
            Some(v) => nm.insert(k.into(), v.clone()),
            None => nm.remove(k),
        };
    }
    nm.remove("selfLink");
    if let Some(g) = om.get("generateName") {
        nm.insert("generateName".into(), g.clone());
    }
    if !nm.contains_key("managedFields") {
        if let Some(mf) = om.get("managedFields") {
            nm.insert("managedFields".into(), mf.clone());
        }
    }
}

/// No new finalizers once deletion started.
fn check_finalizers(ri: &ResourceInfo, old: &Value, new: &Value) -> ApiResult<()> {
    if !is_deleting(old) {
        return Ok(());
    }
    let before = finalizers(old);
    if finalizers(new).iter().any(|f| !before.contains(f)) {
        return Err(ApiError::invalid(
            &ri.kind,
            &ri.group,
            name_of(old),
            vec![Cause::new(
                "FieldValueForbidden",
                "Forbidden: no new finalizers can be added if the object is being deleted",
                "metadata.finalizers",
            )],
        ));
    }
    Ok(())
}

/// Everything after the new object is computed: masking, metadata rules, defaults, validation, generation,
/// managedFields, no-op detection, dry-run, and the commit. `old` and `new` are in the
/// endpoint's shape ([`shaped`]); the commit converts to the storage shape.
#[allow(clippy::too_many_arguments)]
fn finish_write(
    sh: &Shared,
    ri: &ResourceInfo,
    r: &ObjRef,
    sub: Sub,
    old: &Arc<Value>,
    new: Value,
    opts: &WriteOpts,
    record: bool,
) -> OpResult<Value> {
    let mut new = mask(ri, sub, old, new);
    keep_server_metadata(old, &mut new);
    if sub != Sub::Status {
        check_finalizers(ri, old, &new)?;
        default_object(ri, &mut new);
    }
    validate_object(ri, &new)?;
    if ri.generation && spec_changed(ri, old, &new) {
        bump_generation(&mut new);
    }
    if record {
        let schema = schema_of(ri);
        ssa::record_update(
            Some(old),
            &mut new,
            &opts.manager,
            sub.name(),
            &ri.api_version(),
            schema.as_dyn(),
            &now_secs(),
        )?;
    }
    if same_object(old, &new) {
        return Ok((**old).clone());
    }
    opts.admit(Some(old), &new)?;
    // kube-apiserver's ShouldDeleteDuringUpdate: the last finalizer gone ends a deletion, unless a graceful one
    // (a terminating Pod) is still waiting for its kubelet.
    let graceful = old
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        > 0;
    let finished =
        is_deleting(&new) && !graceful && finalizers(&new).is_empty() && r.res.as_ref() != crate::store::NAMESPACES;
    if opts.dry_run {
        return Ok(new);
    }
    let new = to_storage(ri, new);
    let write = if finished {
        Write::Delete(Some(new))
    } else {
        Write::Put(new)
    };
    match sh.store.commit(r, Some(rv_of(old)), write, None) {
        Ok(v) => Ok((*v).clone()),
        Err(e) => Err(commit_err(ri, r, e)),
    }
}

/// The stored object in the endpoint's shape (see [`shaped`]), or 404.
fn load(sh: &Shared, ri: &ResourceInfo, r: &ObjRef) -> OpResult<Arc<Value>> {
    sh.store
        .get(&r.res, &r.ns, &r.name)
        .map(|o| shaped(ri, o))
        .ok_or_else(|| OpError::Api(ApiError::not_found(&ri.plural, &ri.group, &r.name)))
}

fn body_rv(obj: &Value) -> Option<String> {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

fn precondition(ri: &ResourceInfo, old: &Value, want: &Option<String>) -> OpResult<()> {
    match want {
        Some(rv) if *rv != rv_of(old).to_string() => {
            Err(OpError::Api(ApiError::conflict(&ri.plural, &ri.group, name_of(old))))
        }
        _ => Ok(()),
    }
}

// ------------------------------------------------------------------------------------------------------------
// Update, patch, apply

/// PUT: optimistic concurrency on the body's resourceVersion.
#[allow(clippy::too_many_arguments)]
pub fn update(
    sh: &Shared,
    ri: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    sub: Sub,
    mut body: Value,
    dups: &[String],
    opts: &WriteOpts,
) -> ApiResult<Written> {
    let r = obj_ref(ri, ns, name);
    if sub == Sub::Scale {
        return scale_write(sh, ri, &r, |_| Ok(body.clone()), opts);
    }
    check_type(ri, &mut body, false)?;
    check_name(&mut body, name)?;
    check_namespace(ri, &mut body, ns)?;
    let want_rv = body_rv(&body);
    if ri.is_custom() && want_rv.is_none() {
        return Err(ApiError::invalid(
            &ri.kind,
            &ri.group,
            name,
            vec![Cause::new(
                "FieldValueInvalid",
                "Invalid value: 0x0: must be specified for an update",
                "metadata.resourceVersion",
            )],
        ));
    }
    let warnings = field_validation(ri, &mut body, dups, opts.validation)?;
    let object = retry(ri, name, || {
        let old = load(sh, ri, &r)?;
        precondition(ri, &old, &want_rv)?;
        finish_write(sh, ri, &r, sub, &old, body.clone(), opts, true)
    })?;
    Ok(Written {
        object,
        created: false,
        warnings,
    })
}

/// Parse a patch document (400 when undecodable).
fn parse_patch(raw: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(raw).map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
}

fn apply_patch(ri: &ResourceInfo, pt: PatchType, base: &Value, p: &Value) -> ApiResult<Value> {
    match pt {
        PatchType::Json => patch::json_patch(base, p),
        PatchType::Merge => patch::merge_patch(base, p),
        PatchType::Strategic => {
            let schema = schema_of(ri);
            patch::strategic_merge_patch(base, p, schema.as_dyn())
        }
        PatchType::Apply => Err(ApiError::internal("apply is not a patch")),
    }
}

/// PATCH with json, merge or strategic patches; apply goes to [`apply`].
#[allow(clippy::too_many_arguments)]
pub fn patch(
    sh: &Shared,
    ri: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    sub: Sub,
    pt: PatchType,
    raw: &[u8],
    opts: &WriteOpts,
) -> ApiResult<Written> {
    if opts.force && pt != PatchType::Apply {
        return Err(ApiError::invalid_msg(
            "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch",
        ));
    }
    if pt == PatchType::Apply {
        return apply(sh, ri, ns, name, sub, raw, opts);
    }
    if pt == PatchType::Strategic && ri.is_custom() {
        return Err(ApiError::unsupported_media_type(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    let p = parse_patch(raw)?;
    let dups = validation::duplicate_json_keys(raw);
    let r = obj_ref(ri, ns, name);
    if sub == Sub::Scale {
        return scale_write(sh, ri, &r, |scale| apply_patch(ri, pt, scale, &p), opts);
    }
    let mut warnings = Vec::new();
    let object = retry(ri, name, || {
        let old = load(sh, ri, &r)?;
        let mut patched = apply_patch(ri, pt, &old, &p)?;
        precondition(ri, &old, &body_rv(&patched))?;
        check_type(ri, &mut patched, true)?;
        check_name(&mut patched, name)?;
        check_namespace(ri, &mut patched, ns)?;
        warnings = field_validation(ri, &mut patched, &dups, opts.validation)?;
        finish_write(sh, ri, &r, sub, &old, patched, opts, true)
    })?;
    Ok(Written {
        object,
        created: false,
        warnings,
    })
}

/// Server-side apply: upsert with field ownership.
#[allow(clippy::too_many_arguments)]
pub fn apply(
    sh: &Shared,
    ri: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    sub: Sub,
    raw: &[u8],
    opts: &WriteOpts,
) -> ApiResult<Written> {
    let Some(manager) = opts.field_manager.clone().filter(|m| !m.is_empty()) else {
        return Err(ApiError::invalid_msg(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    };
    if sub == Sub::Scale {
        return Err(ApiError::method_not_allowed(
            "apply is not supported on the scale subresource",
        ));
    }
    let mut applied = parse_yaml_or_json(raw)?;
    check_type(ri, &mut applied, true)?;
    if applied.pointer("/metadata/managedFields").is_some_and(|v| !v.is_null()) {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    check_name(&mut applied, name)?;
    check_namespace(ri, &mut applied, ns)?;
    applied = mask_applied(ri, sub, applied);
    let dups = if raw.first() == Some(&b'{') {
        validation::duplicate_json_keys(raw)
    } else {
        Vec::new()
    };
    let warnings = field_validation(ri, &mut applied, &dups, opts.validation)?;
    let r = obj_ref(ri, ns, name);
    let schema = schema_of(ri);
    let api_version = ri.api_version();
    let mut created = false;
    let object = retry(ri, name, || {
        created = false;
        let live = sh.store.get(&r.res, &r.ns, &r.name).map(|o| shaped(ri, o));
        if live.is_none() && sub != Sub::Main {
            return Err(ApiError::not_found(&ri.plural, &ri.group, name).into());
        }
        let now = now_secs();
        let req = ssa::ApplyRequest {
            live: live.as_deref(),
            applied: &applied,
            manager: &manager,
            force: opts.force,
            subresource: sub.name(),
            api_version: &api_version,
            schema: schema.as_dyn(),
            now: &now,
        };
        let result = ssa::apply(req)?;
        match live {
            None => {
                check_crd_not_terminating(sh, ri)?;
                created = true;
                let mut obj = result;
                prepare_new(ri, &mut obj);
                default_object(ri, &mut obj);
                validate_object(ri, &obj)?;
                opts.admit(None, &obj)?;
                // Lost a race with another creator: retry as an update.
                commit_create(sh, ri, ns, name, obj, opts.dry_run).map_err(|e| {
                    if e.reason == "AlreadyExists" {
                        OpError::Stale
                    } else {
                        OpError::Api(e)
                    }
                })
            }
            Some(old) => finish_write(sh, ri, &r, sub, &old, result, opts, false),
        }
    })?;
    Ok(Written {
        object,
        created,
        warnings,
    })
}

/// What an apply may set for a subresource.
fn mask_applied(ri: &ResourceInfo, sub: Sub, mut applied: Value) -> Value {
    match sub {
        Sub::Status => {
            let mut out =
                json!({"apiVersion": applied["apiVersion"], "kind": applied["kind"], "metadata": applied["metadata"]});
            if let Some(s) = applied.get("status") {
                out["status"] = s.clone();
            }
            out
        }
        _ if ri.status => {
            if let Some(o) = applied.as_object_mut() {
                o.remove("status");
            }
            applied
        }
        _ => applied,
    }
}

// ------------------------------------------------------------------------------------------------------------
// Scale

fn pointer_of(json_path: &str) -> String {
    json_path
        .trim_start_matches('.')
        .split('.')
        .fold(String::new(), |acc, p| format!("{acc}/{p}"))
}

fn set_pointer(obj: &mut Value, ptr: &str, value: Value) {
    let mut cur = obj;
    let parts: Vec<&str> = ptr.split('/').filter(|p| !p.is_empty()).collect();
    for (i, p) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let Some(m) = cur.as_object_mut() else { return };
        if i + 1 == parts.len() {
            m.insert(p.to_string(), value);
            return;
        }
        cur = m.entry(p.to_string()).or_insert_with(|| json!({}));
    }
}

fn selector_string(sel: &Value) -> Option<String> {
    let labels = sel.get("matchLabels")?.as_object()?;
    Some(
        labels
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// The `autoscaling/v1 Scale` view of an object.
pub fn scale_of(ri: &ResourceInfo, obj: &Value) -> ApiResult<Value> {
    let Some(spec) = &ri.scale else {
        return Err(ApiError::no_such_path());
    };
    let replicas = obj
        .pointer(&pointer_of(&spec.spec_replicas))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let status_replicas = obj
        .pointer(&pointer_of(&spec.status_replicas))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let selector = match &spec.label_selector {
        Some(p) => match obj.pointer(&pointer_of(p)) {
            Some(Value::String(s)) => Some(s.clone()),
            _ => obj.pointer("/spec/selector").and_then(selector_string),
        },
        None => None,
    };
    let m = &obj["metadata"];
    let mut md = Map::new();
    for k in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(v) = m.get(k) {
            md.insert(k.into(), v.clone());
        }
    }
    let mut status = json!({"replicas": status_replicas});
    if let Some(s) = selector {
        status["selector"] = json!(s);
    }
    Ok(
        json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": md, "spec": {"replicas": replicas}, "status": status}),
    )
}

/// PUT/PATCH on `/scale`: compute the new Scale, map `spec.replicas` into the object.
fn scale_write(
    sh: &Shared,
    ri: &ResourceInfo,
    r: &ObjRef,
    f: impl Fn(&Value) -> ApiResult<Value>,
    opts: &WriteOpts,
) -> ApiResult<Written> {
    let Some(spec) = ri.scale.clone() else {
        return Err(ApiError::no_such_path());
    };
    let object = retry(ri, &r.name, || {
        let old = load(sh, ri, r)?;
        let scale = scale_of(ri, &old)?;
        let new_scale = f(&scale)?;
        precondition(ri, &old, &body_rv(&new_scale))?;
        let Some(replicas) = new_scale
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .filter(|n| *n >= 0)
        else {
            return Err(ApiError::invalid(
                "Scale",
                "autoscaling",
                &r.name,
                vec![Cause::new(
                    "FieldValueInvalid",
                    "Invalid value: must be a non-negative integer",
                    "spec.replicas",
                )],
            )
            .into());
        };
        let mut new = (*old).clone();
        set_pointer(&mut new, &pointer_of(&spec.spec_replicas), json!(replicas));
        let obj = finish_write(sh, ri, r, Sub::Scale, &old, new, opts, true)?;
        scale_of(ri, &obj).map_err(OpError::Api)
    })?;
    Ok(Written {
        object,
        created: false,
        warnings: Vec::new(),
    })
}

// ------------------------------------------------------------------------------------------------------------
// Delete

fn status_success(ri: &ResourceInfo, obj: &Value) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": {"name": name_of(obj), "group": ri.group, "kind": ri.plural, "uid": obj.pointer("/metadata/uid").cloned().unwrap_or(Value::Null)}})
}

fn returns_object(ri: &ResourceInfo) -> bool {
    ri.group.is_empty()
        && matches!(
            ri.plural.as_str(),
            "pods" | "serviceaccounts" | "persistentvolumeclaims"
        )
}

fn check_preconditions(ri: &ResourceInfo, old: &Value, o: &DeleteOpts) -> ApiResult<()> {
    let name = name_of(old);
    if let Some(uid) = o.uid.as_deref().filter(|u| !u.is_empty()) {
        let have = old.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("");
        if uid != have {
            return Err(ApiError::conflict_msg(format!(
                "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: UID in precondition: {uid}, UID in object meta: {have}",
                crate::error::qualified(&ri.plural, &ri.group)
            ))
            .with_details(&ri.plural, &ri.group, name));
        }
    }
    if let Some(rv) = o.resource_version.as_deref().filter(|u| !u.is_empty()) {
        let have = rv_of(old).to_string();
        if rv != have {
            return Err(ApiError::conflict_msg(format!(
                "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {have}",
                crate::error::qualified(&ri.plural, &ri.group)
            ))
            .with_details(&ri.plural, &ri.group, name));
        }
    }
    Ok(())
}

/// The finalizer a propagation policy adds.
fn policy_finalizer(o: &DeleteOpts) -> ApiResult<Option<&'static str>> {
    match o.propagation.as_deref() {
        Some("Orphan") => Ok(Some(FINALIZER_ORPHAN)),
        Some("Foreground") => Ok(Some(FINALIZER_FOREGROUND)),
        Some("Background") => Ok(None),
        Some("") | None => Ok(match o.orphan_dependents {
            Some(true) => Some(FINALIZER_ORPHAN),
            _ => None,
        }),
        Some(other) => Err(ApiError::bad_request(format!(
            "propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
        ))),
    }
}

/// The grace period of a Pod deletion (kube-apiserver's `CheckGracefulDelete`): the request's, else the Pod's
/// `terminationGracePeriodSeconds`; 0 for a Pod no kubelet runs (not scheduled, or already finished), negative
/// values count as 1. 0 for every other kind: only Pods terminate gracefully.
pub fn pod_grace_period(ri: &ResourceInfo, pod: &Value, o: &DeleteOpts) -> i64 {
    if !(ri.group.is_empty() && ri.plural == "pods") {
        return 0;
    }
    let scheduled = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty())
        || pod
            .pointer("/status/hostIP")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
    let finished = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if !scheduled || finished {
        return 0;
    }
    let period = o
        .grace_period_seconds
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(0);
    if period < 0 {
        1
    } else {
        period
    }
}

/// `deletionTimestamp` for a grace period: now for 0, else when the period ends, rounded up to the second the
/// timestamp is written with so that the period is never cut short.
fn deletion_deadline(grace: i64) -> String {
    if grace <= 0 {
        return now_secs();
    }
    let at = Utc::now() + chrono::Duration::seconds(grace) + chrono::Duration::nanoseconds(999_999_999);
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A DELETE of an object whose graceful deletion is already under way: a shorter grace period moves
/// `deletionTimestamp` forward (0 deletes it now, unless finalizers hold it); anything else changes nothing.
/// `None` when no graceful deletion is pending.
fn pending_graceful(
    sh: &Shared,
    ri: &ResourceInfo,
    r: &ObjRef,
    old: &Arc<Value>,
    o: &DeleteOpts,
) -> Option<OpResult<Deleted>> {
    let current = old
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)?;
    if !is_deleting(old) || current <= 0 {
        return None;
    }
    let requested = o.grace_period_seconds.map(|p| p.max(0)).filter(|p| *p < current);
    let Some(period) = requested else {
        return Some(Ok(Deleted::Object((**old).clone())));
    };
    if period == 0 && finalizers(old).is_empty() {
        return Some(delete_now(sh, ri, r, old, o.dry_run));
    }
    let mut new = (**old).clone();
    let deadline = old
        .pointer("/metadata/deletionTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map_or_else(Utc::now, |t| t.with_timezone(&Utc));
    let shortened = deadline - chrono::Duration::seconds(current - period);
    let m = meta_mut(&mut new);
    m.insert(
        "deletionTimestamp".into(),
        json!(shortened.to_rfc3339_opts(SecondsFormat::Secs, true)),
    );
    m.insert("deletionGracePeriodSeconds".into(), json!(period));
    if o.dry_run {
        return Some(Ok(Deleted::Object(new)));
    }
    Some(
        match sh
            .store
            .commit(r, Some(rv_of(old)), Write::Put(to_storage(ri, new)), None)
        {
            Ok(v) => Ok(Deleted::Object((*v).clone())),
            Err(e) => Err(commit_err(ri, r, e)),
        },
    )
}

/// DELETE of one object.
pub fn delete(sh: &Shared, ri: &ResourceInfo, ns: Option<&str>, name: &str, o: &DeleteOpts) -> ApiResult<Deleted> {
    let r = obj_ref(ri, ns, name);
    let extra = policy_finalizer(o)?;
    retry(ri, name, || {
        let old = load(sh, ri, &r)?;
        check_preconditions(ri, &old, o)?;
        if r.res.as_ref() == crate::store::NAMESPACES {
            return delete_namespace(sh, ri, &r, &old, o);
        }
        if let Some(done) = pending_graceful(sh, ri, &r, &old, o) {
            return done;
        }
        let grace = if is_deleting(&old) {
            0
        } else {
            pod_grace_period(ri, &old, o)
        };
        let mut fins = finalizers(&old);
        let mut add = |f: &str| {
            if !fins.iter().any(|x| x == f) {
                fins.push(f.to_string());
            }
        };
        if let Some(f) = extra {
            add(f);
        }
        if ri.kind == "CustomResourceDefinition" && ri.group == "apiextensions.k8s.io" {
            add(FINALIZER_CRD_CLEANUP);
        }
        if fins.is_empty() && grace == 0 {
            return delete_now(sh, ri, &r, &old, o.dry_run);
        }
        let mut new = (*old).clone();
        set_finalizers(&mut new, &fins);
        if !is_deleting(&old) {
            let m = meta_mut(&mut new);
            m.insert("deletionTimestamp".into(), json!(deletion_deadline(grace)));
            m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            if old.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0) > 0 {
                bump_generation(&mut new);
            }
        }
        if same_object(&old, &new) || o.dry_run {
            return Ok(Deleted::Object(new));
        }
        match sh
            .store
            .commit(&r, Some(rv_of(&old)), Write::Put(to_storage(ri, new)), None)
        {
            Ok(v) => Ok(Deleted::Object((*v).clone())),
            Err(e) => Err(commit_err(ri, &r, e)),
        }
    })
}

fn delete_now(sh: &Shared, ri: &ResourceInfo, r: &ObjRef, old: &Arc<Value>, dry_run: bool) -> OpResult<Deleted> {
    let last = if dry_run {
        (**old).clone()
    } else {
        match sh.store.commit(r, Some(rv_of(old)), Write::Delete(None), None) {
            Ok(v) => (*v).clone(),
            Err(e) => return Err(commit_err(ri, r, e)),
        }
    };
    Ok(if returns_object(ri) {
        Deleted::Object(last)
    } else {
        Deleted::Status(status_success(ri, &last))
    })
}

/// Namespaces are always deferred: Terminating until the namespace controller empties them.
fn delete_namespace(sh: &Shared, ri: &ResourceInfo, r: &ObjRef, old: &Arc<Value>, o: &DeleteOpts) -> OpResult<Deleted> {
    if is_deleting(old) {
        return Ok(Deleted::Object((**old).clone()));
    }
    let mut new = (**old).clone();
    meta_mut(&mut new).insert("deletionTimestamp".into(), json!(now_secs()));
    new["status"] = json!({"phase": "Terminating"});
    if !new.pointer("/spec/finalizers").is_some_and(Value::is_array) {
        new["spec"] = json!({"finalizers": ["kubernetes"]});
    }
    if o.dry_run {
        return Ok(Deleted::Object(new));
    }
    match sh.store.commit(r, Some(rv_of(old)), Write::Put(new), None) {
        Ok(v) => Ok(Deleted::Object((*v).clone())),
        Err(e) => Err(commit_err(ri, r, e)),
    }
}

/// Whether an object passes label and field selectors.
pub fn matches(obj: &Value, labels: &LabelSelector, fields: &FieldSelector) -> bool {
    (labels.is_empty() || labels.matches(obj.pointer("/metadata/labels").and_then(Value::as_object)))
        && (fields.is_empty() || fields.matches(obj))
}

/// DELETE on a collection: a `<Kind>List` of what was deleted.
pub fn delete_collection(
    sh: &Shared,
    ri: &ResourceInfo,
    ns: Option<&str>,
    labels: &LabelSelector,
    fields: &FieldSelector,
    o: &DeleteOpts,
) -> ApiResult<Value> {
    let (_, items) = sh.store.list(&ri.key, if ri.namespaced { ns } else { None });
    let mut deleted = Vec::new();
    for obj in items.iter().filter(|o| matches(o, labels, fields)) {
        let name = name_of(obj).to_string();
        let obj_ns = obj.pointer("/metadata/namespace").and_then(Value::as_str);
        match delete(sh, ri, obj_ns, &name, o) {
            Ok(Deleted::Object(v)) => deleted.push(for_version(ri, &v)),
            Ok(Deleted::Status(_)) => deleted.push(for_version(ri, obj)),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(json!({"kind": ri.list_kind(), "apiVersion": ri.api_version(), "metadata": {}, "items": deleted}))
}

// ------------------------------------------------------------------------------------------------------------
// Internal helpers for controllers

/// Read-modify-write by a controller: `f` edits a copy and returns whether anything should be written.
pub fn modify(
    sh: &Shared,
    ri: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    sub: Sub,
    manager: &str,
    mut f: impl FnMut(&mut Value) -> bool,
) -> ApiResult<Option<Value>> {
    let r = obj_ref(ri, ns, name);
    let opts = WriteOpts::system(manager);
    retry(ri, name, || {
        let Some(old) = sh.store.get(&r.res, &r.ns, &r.name).map(|o| shaped(ri, o)) else {
            return Ok(None);
        };
        let mut new = (*old).clone();
        if !f(&mut new) {
            return Ok(None);
        }
        finish_write(sh, ri, &r, sub, &old, new, &opts, true).map(Some)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names() {
        let n = generate_name("gen-");
        assert_eq!(n.len(), 9);
        assert!(n[4..].bytes().all(|b| GEN_ALPHABET.contains(&b)));
    }

    #[test]
    fn noop_ignores_managed_field_times() {
        let a = json!({"metadata":{"name":"x","managedFields":[{"manager":"m","time":"1"}]},"data":{"a":"1"}});
        let b = json!({"metadata":{"name":"x","managedFields":[{"manager":"m","time":"2"}]},"data":{"a":"1"}});
        let c = json!({"metadata":{"name":"x","managedFields":[{"manager":"m","time":"2"}]},"data":{"a":"2"}});
        assert!(same_object(&a, &b));
        assert!(!same_object(&a, &c));
    }

    #[test]
    fn pointers() {
        assert_eq!(pointer_of(".spec.replicas"), "/spec/replicas");
        let mut v = json!({});
        set_pointer(&mut v, "/spec/replicas", json!(3));
        assert_eq!(v, json!({"spec":{"replicas":3}}));
    }

    #[test]
    fn generation_rules() {
        let reg = crate::registry::Registry::new();
        let d = reg.find("apps", "v1", "deployments").unwrap();
        let old = json!({"metadata":{"generation":1},"spec":{"replicas":1},"status":{"a":1}});
        assert!(!spec_changed(
            &d,
            &old,
            &json!({"metadata":{"generation":1,"labels":{"a":"b"}},"spec":{"replicas":1},"status":{"a":2}})
        ));
        assert!(spec_changed(
            &d,
            &old,
            &json!({"metadata":{},"spec":{"replicas":2},"status":{"a":1}})
        ));
    }

    #[test]
    fn delete_policies() {
        let o = DeleteOpts {
            propagation: Some("Foreground".into()),
            ..Default::default()
        };
        assert_eq!(policy_finalizer(&o).unwrap(), Some(FINALIZER_FOREGROUND));
        let o = DeleteOpts {
            orphan_dependents: Some(true),
            ..Default::default()
        };
        assert_eq!(policy_finalizer(&o).unwrap(), Some(FINALIZER_ORPHAN));
        let o = DeleteOpts {
            propagation: Some("Bogus".into()),
            ..Default::default()
        };
        assert!(policy_finalizer(&o).is_err());
    }
}
