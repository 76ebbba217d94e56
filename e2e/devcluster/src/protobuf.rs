//! Decoding of the Kubernetes protobuf envelope (`k8s\0` + runtime.Unknown) that kubectl >= 1.32 typed
//! clients POST (spec §16), for Namespace, ConfigMap, Secret, ServiceAccount and Deployment, into the JSON
//! object form the rest of devcluster works on.
//!
//! kubectl 1.32 never retries a 415 as JSON, so without this every imperative `kubectl create` fails. The
//! decoder is table-driven: each message is a static list of `(field number, JSON name, type)` taken from the
//! k8s.io/api and k8s.io/apimachinery `generated.proto` files. Fields the tables do not list are skipped.
//!
//! Go's gogo-protobuf marshaller writes every non-pointer field, so unset strings arrive as `""`, unset
//! numbers as `0` and unset structs as empty messages. Those are dropped (as `omitempty` JSON would); fields
//! that are pointers in Go (`replicas`, `immutable`, ...) keep their value even when it is zero, because
//! there presence is the information.

use base64::Engine;
use chrono::DateTime;
use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};

pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The 4-byte prefix of every Kubernetes protobuf body (`runtime/serializer/protobuf`).
const MAGIC: &[u8; 4] = b"k8s\x00";

/// Nesting bound; the tables are not recursive, so this only guards against a future mistake.
const MAX_DEPTH: usize = 32;

/// Decode one protobuf request body into a JSON object carrying `apiVersion` and `kind`. Unset strings
/// (`""`) are treated as unset. Unknown kinds answer 415 with a clear message.
// NB: `ApiError` is the crate-wide error type; boxing it here alone would only make callers unwrap a box.
#[allow(clippy::result_large_err)]
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    let Some(envelope) = body.strip_prefix(MAGIC.as_slice()) else {
        return Err(ApiError::bad_request(
            "protobuf body does not start with the Kubernetes magic prefix \"k8s\\x00\"",
        ));
    };
    let unknown = Unknown::decode(envelope).map_err(bad_body)?;
    if !unknown.content_encoding.is_empty() {
        return Err(ApiError::unsupported_media_type(format!(
            "protobuf contentEncoding {:?} is not supported; send an unencoded body or application/json",
            unknown.content_encoding
        )));
    }
    if unknown.kind.is_empty() {
        return Err(ApiError::bad_request(
            "protobuf body carries no kind in its runtime.Unknown typeMeta",
        ));
    }
    let Some(fields) = schema_for(&unknown.api_version, &unknown.kind) else {
        return Err(ApiError::unsupported_media_type(format!(
            "the protobuf encoding of {} (apiVersion {:?}) is not supported by this server; send application/json",
            unknown.kind, unknown.api_version
        )));
    };
    let mut object = Map::new();
    object.insert("apiVersion".into(), Value::String(unknown.api_version));
    object.insert("kind".into(), Value::String(unknown.kind));
    object.extend(decode_message(unknown.raw, fields, 0).map_err(bad_body)?);
    object.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    Ok(Value::Object(object))
}

fn bad_body(e: String) -> ApiError {
    ApiError::bad_request(format!("failed to decode the protobuf request body: {e}"))
}

// ---------------------------------------------------------------------------------------------------------------
// Wire format
// ---------------------------------------------------------------------------------------------------------------

/// One field value as it appears on the wire.
#[derive(Debug, Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

/// A bounds-checked cursor over protobuf bytes; every read fails instead of panicking.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in 0..10u32 {
            let byte = *self.buf.get(self.pos).ok_or("truncated varint")?;
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << (7 * shift);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or("truncated field")?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// The next `(field number, value)`, or `None` at the end of the buffer.
    fn field(&mut self) -> Result<Option<(u64, Wire<'a>)>, String> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 {
            return Err("field number 0".into());
        }
        let value = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => Wire::Fixed64(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| "bad fixed64")?)),
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| "length overflows")?;
                Wire::Bytes(self.take(len)?)
            }
            5 => Wire::Fixed32(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| "bad fixed32")?)),
            t => return Err(format!("unsupported wire type {t} for field {number}")),
        };
        Ok(Some((number, value)))
    }
}

/// `runtime.Unknown`: {1 typeMeta{1 apiVersion, 2 kind}, 2 raw, 3 contentEncoding, 4 contentType}.
#[derive(Default)]
struct Unknown<'a> {
    api_version: String,
    kind: String,
    raw: &'a [u8],
    content_encoding: String,
}

impl<'a> Unknown<'a> {
    fn decode(buf: &'a [u8]) -> Result<Self, String> {
        let mut out = Unknown::default();
        let mut r = Reader::new(buf);
        while let Some((number, value)) = r.field()? {
            match (number, value) {
                (1, Wire::Bytes(b)) => (out.api_version, out.kind) = decode_type_meta(b)?,
                (2, Wire::Bytes(b)) => out.raw = b,
                (3, Wire::Bytes(b)) => out.content_encoding = utf8(b),
                (4, Wire::Bytes(_)) => {}
                (1..=4, _) => return Err(format!("runtime.Unknown field {number} has the wrong wire type")),
                _ => {}
            }
        }
        Ok(out)
    }
}

fn decode_type_meta(buf: &[u8]) -> Result<(String, String), String> {
    let (mut api_version, mut kind) = (String::new(), String::new());
    let mut r = Reader::new(buf);
    while let Some((number, value)) = r.field()? {
        match (number, value) {
            (1, Wire::Bytes(b)) => api_version = utf8(b),
            (2, Wire::Bytes(b)) => kind = utf8(b),
            (1 | 2, _) => return Err("typeMeta field has the wrong wire type".into()),
            _ => {}
        }
    }
    Ok((api_version, kind))
}

/// Go strings may hold any bytes; JSON cannot, so invalid UTF-8 is replaced rather than refused.
fn utf8(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

// ---------------------------------------------------------------------------------------------------------------
// Schema tables
// ---------------------------------------------------------------------------------------------------------------

/// How one field's wire value becomes JSON.
#[derive(Debug, Clone, Copy)]
enum Ty {
    Str,
    /// `bytes` → base64, as Go's JSON encoding of `[]byte`.
    Bytes,
    /// Any varint integer (int32/int64; negatives arrive sign-extended to 64 bits).
    Int,
    Bool,
    Msg(&'static [F]),
    /// A Go embedded struct (e.g. `LocalObjectReference` in `ConfigMapKeySelector`): its JSON fields are inlined.
    Inline(&'static [F]),
    /// `map<string, V>`, sent as repeated entries {1 key, 2 value}.
    Map(&'static Ty),
    /// meta/v1 `Time` {1 seconds, 2 nanos} → RFC 3339 (second precision, as the JSON form).
    Time,
    /// resource `Quantity` {1 string}.
    Quantity,
    /// intstr `IntOrString` {1 type, 2 intVal, 3 strVal}.
    IntOrString,
    /// meta/v1 `FieldsV1` {1 raw JSON bytes}.
    RawJson,
}

/// One field of a message table.
#[derive(Debug, Clone, Copy)]
struct F {
    num: u64,
    name: &'static str,
    ty: Ty,
    repeated: bool,
    /// A pointer in Go: presence is meaningful, so zero values are kept.
    ptr: bool,
}

const fn f(num: u64, name: &'static str, ty: Ty) -> F {
    F {
        num,
        name,
        ty,
        repeated: false,
        ptr: false,
    }
}
const fn p(num: u64, name: &'static str, ty: Ty) -> F {
    F {
        num,
        name,
        ty,
        repeated: false,
        ptr: true,
    }
}
const fn r(num: u64, name: &'static str, ty: Ty) -> F {
    F {
        num,
        name,
        ty,
        repeated: true,
        ptr: false,
    }
}

const STR_MAP: Ty = Ty::Map(&Ty::Str);
const BYTES_MAP: Ty = Ty::Map(&Ty::Bytes);
const QUANTITY_MAP: Ty = Ty::Map(&Ty::Quantity);

// k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto
const OWNER_REFERENCE: &[F] = &[
    f(1, "kind", Ty::Str),
    f(3, "name", Ty::Str),
    f(4, "uid", Ty::Str),
    f(5, "apiVersion", Ty::Str),
    p(6, "controller", Ty::Bool),
    p(7, "blockOwnerDeletion", Ty::Bool),
];
const MANAGED_FIELDS_ENTRY: &[F] = &[
    f(1, "manager", Ty::Str),
    f(2, "operation", Ty::Str),
    f(3, "apiVersion", Ty::Str),
    p(4, "time", Ty::Time),
    f(6, "fieldsType", Ty::Str),
    p(7, "fieldsV1", Ty::RawJson),
    f(8, "subresource", Ty::Str),
];
/// 4 selfLink and 15 clusterName are deliberately absent: the server must not echo them.
const OBJECT_META: &[F] = &[
    f(1, "name", Ty::Str),
    f(2, "generateName", Ty::Str),
    f(3, "namespace", Ty::Str),
    f(5, "uid", Ty::Str),
    f(6, "resourceVersion", Ty::Str),
    f(7, "generation", Ty::Int),
    f(8, "creationTimestamp", Ty::Time),
    p(9, "deletionTimestamp", Ty::Time),
    p(10, "deletionGracePeriodSeconds", Ty::Int),
    f(11, "labels", STR_MAP),
    f(12, "annotations", STR_MAP),
    r(13, "ownerReferences", Ty::Msg(OWNER_REFERENCE)),
    r(14, "finalizers", Ty::Str),
    r(17, "managedFields", Ty::Msg(MANAGED_FIELDS_ENTRY)),
];
const METADATA: F = f(1, "metadata", Ty::Msg(OBJECT_META));
const LABEL_SELECTOR_REQUIREMENT: &[F] = &[f(1, "key", Ty::Str), f(2, "operator", Ty::Str), r(3, "values", Ty::Str)];
const LABEL_SELECTOR: &[F] = &[
    f(1, "matchLabels", STR_MAP),
    r(2, "matchExpressions", Ty::Msg(LABEL_SELECTOR_REQUIREMENT)),
];

// k8s.io/api/core/v1/generated.proto
const LOCAL_OBJECT_REFERENCE: &[F] = &[f(1, "name", Ty::Str)];
const OBJECT_REFERENCE: &[F] = &[
    f(1, "kind", Ty::Str),
    f(2, "namespace", Ty::Str),
    f(3, "name", Ty::Str),
    f(4, "uid", Ty::Str),
    f(5, "apiVersion", Ty::Str),
    f(6, "resourceVersion", Ty::Str),
    f(7, "fieldPath", Ty::Str),
];
const CONTAINER_PORT: &[F] = &[
    f(1, "name", Ty::Str),
    f(2, "hostPort", Ty::Int),
    f(3, "containerPort", Ty::Int),
    f(4, "protocol", Ty::Str),
    f(5, "hostIP", Ty::Str),
];
const OBJECT_FIELD_SELECTOR: &[F] = &[f(1, "apiVersion", Ty::Str), f(2, "fieldPath", Ty::Str)];
const RESOURCE_FIELD_SELECTOR: &[F] = &[
    f(1, "containerName", Ty::Str),
    f(2, "resource", Ty::Str),
    f(3, "divisor", Ty::Quantity),
];
/// ConfigMapKeySelector and SecretKeySelector share this shape.
const KEY_SELECTOR: &[F] = &[
    f(1, "", Ty::Inline(LOCAL_OBJECT_REFERENCE)),
    f(2, "key", Ty::Str),
    p(3, "optional", Ty::Bool),
];
const ENV_VAR_SOURCE: &[F] = &[
    p(1, "fieldRef", Ty::Msg(OBJECT_FIELD_SELECTOR)),
    p(2, "resourceFieldRef", Ty::Msg(RESOURCE_FIELD_SELECTOR)),
    p(3, "configMapKeyRef", Ty::Msg(KEY_SELECTOR)),
    p(4, "secretKeyRef", Ty::Msg(KEY_SELECTOR)),
];
const ENV_VAR: &[F] = &[
    f(1, "name", Ty::Str),
    f(2, "value", Ty::Str),
    p(3, "valueFrom", Ty::Msg(ENV_VAR_SOURCE)),
];
/// ConfigMapEnvSource and SecretEnvSource share this shape.
const ENV_SOURCE_REF: &[F] = &[f(1, "", Ty::Inline(LOCAL_OBJECT_REFERENCE)), p(2, "optional", Ty::Bool)];
const ENV_FROM_SOURCE: &[F] = &[
    f(1, "prefix", Ty::Str),
    p(2, "configMapRef", Ty::Msg(ENV_SOURCE_REF)),
    p(3, "secretRef", Ty::Msg(ENV_SOURCE_REF)),
];
const RESOURCE_CLAIM: &[F] = &[f(1, "name", Ty::Str), f(2, "request", Ty::Str)];
const RESOURCE_REQUIREMENTS: &[F] = &[
    f(1, "limits", QUANTITY_MAP),
    f(2, "requests", QUANTITY_MAP),
    r(3, "claims", Ty::Msg(RESOURCE_CLAIM)),
];
const VOLUME_MOUNT: &[F] = &[
    f(1, "name", Ty::Str),
    f(2, "readOnly", Ty::Bool),
    f(3, "mountPath", Ty::Str),
    f(4, "subPath", Ty::Str),
    p(5, "mountPropagation", Ty::Str),
    f(6, "subPathExpr", Ty::Str),
    p(7, "recursiveReadOnly", Ty::Str),
];
const CONTAINER: &[F] = &[
    f(1, "name", Ty::Str),
    f(2, "image", Ty::Str),
    r(3, "command", Ty::Str),
    r(4, "args", Ty::Str),
    f(5, "workingDir", Ty::Str),
    r(6, "ports", Ty::Msg(CONTAINER_PORT)),
    r(7, "env", Ty::Msg(ENV_VAR)),
    f(8, "resources", Ty::Msg(RESOURCE_REQUIREMENTS)),
    r(9, "volumeMounts", Ty::Msg(VOLUME_MOUNT)),
    f(13, "terminationMessagePath", Ty::Str),
    f(14, "imagePullPolicy", Ty::Str),
    f(16, "stdin", Ty::Bool),
    f(17, "stdinOnce", Ty::Bool),
    f(18, "tty", Ty::Bool),
    r(19, "envFrom", Ty::Msg(ENV_FROM_SOURCE)),
    f(20, "terminationMessagePolicy", Ty::Str),
    p(24, "restartPolicy", Ty::Str),
];
const KEY_TO_PATH: &[F] = &[f(1, "key", Ty::Str), f(2, "path", Ty::Str), p(3, "mode", Ty::Int)];
const EMPTY_DIR: &[F] = &[f(1, "medium", Ty::Str), p(2, "sizeLimit", Ty::Quantity)];
const HOST_PATH: &[F] = &[f(1, "path", Ty::Str), p(2, "type", Ty::Str)];
const SECRET_VOLUME: &[F] = &[
    f(1, "secretName", Ty::Str),
    r(2, "items", Ty::Msg(KEY_TO_PATH)),
    p(3, "defaultMode", Ty::Int),
    p(4, "optional", Ty::Bool),
];
const CONFIGMAP_VOLUME: &[F] = &[
    f(1, "", Ty::Inline(LOCAL_OBJECT_REFERENCE)),
    r(2, "items", Ty::Msg(KEY_TO_PATH)),
    p(3, "defaultMode", Ty::Int),
    p(4, "optional", Ty::Bool),
];
const PVC_VOLUME: &[F] = &[f(1, "claimName", Ty::Str), f(2, "readOnly", Ty::Bool)];
/// The commonly used members of the `VolumeSource` one-of (inlined into `Volume`).
const VOLUME_SOURCE: &[F] = &[
    p(1, "hostPath", Ty::Msg(HOST_PATH)),
    p(2, "emptyDir", Ty::Msg(EMPTY_DIR)),
    p(6, "secret", Ty::Msg(SECRET_VOLUME)),
    p(10, "persistentVolumeClaim", Ty::Msg(PVC_VOLUME)),
    p(19, "configMap", Ty::Msg(CONFIGMAP_VOLUME)),
];
const VOLUME: &[F] = &[f(1, "name", Ty::Str), f(2, "", Ty::Inline(VOLUME_SOURCE))];
const TOLERATION: &[F] = &[
    f(1, "key", Ty::Str),
    f(2, "operator", Ty::Str),
    f(3, "value", Ty::Str),
    f(4, "effect", Ty::Str),
    p(5, "tolerationSeconds", Ty::Int),
];
const POD_SPEC: &[F] = &[
    r(1, "volumes", Ty::Msg(VOLUME)),
    r(2, "containers", Ty::Msg(CONTAINER)),
    f(3, "restartPolicy", Ty::Str),
    p(4, "terminationGracePeriodSeconds", Ty::Int),
    p(5, "activeDeadlineSeconds", Ty::Int),
    f(6, "dnsPolicy", Ty::Str),
    f(7, "nodeSelector", STR_MAP),
    f(8, "serviceAccountName", Ty::Str),
    f(9, "serviceAccount", Ty::Str),
    f(10, "nodeName", Ty::Str),
    f(11, "hostNetwork", Ty::Bool),
    f(12, "hostPID", Ty::Bool),
    f(13, "hostIPC", Ty::Bool),
    r(15, "imagePullSecrets", Ty::Msg(LOCAL_OBJECT_REFERENCE)),
    f(16, "hostname", Ty::Str),
    f(17, "subdomain", Ty::Str),
    f(19, "schedulerName", Ty::Str),
    r(20, "initContainers", Ty::Msg(CONTAINER)),
    p(21, "automountServiceAccountToken", Ty::Bool),
    r(22, "tolerations", Ty::Msg(TOLERATION)),
    f(24, "priorityClassName", Ty::Str),
    p(25, "priority", Ty::Int),
    p(29, "runtimeClassName", Ty::Str),
    p(30, "enableServiceLinks", Ty::Bool),
    p(31, "preemptionPolicy", Ty::Str),
    p(35, "setHostnameAsFQDN", Ty::Bool),
    p(37, "hostUsers", Ty::Bool),
];
const POD_TEMPLATE_SPEC: &[F] = &[METADATA, f(2, "spec", Ty::Msg(POD_SPEC))];
const POD: &[F] = &[METADATA, f(2, "spec", Ty::Msg(POD_SPEC))];
const NAMESPACE: &[F] = &[METADATA, f(2, "spec", Ty::Msg(&[r(1, "finalizers", Ty::Str)]))];
const CONFIG_MAP: &[F] = &[
    METADATA,
    f(2, "data", STR_MAP),
    f(3, "binaryData", BYTES_MAP),
    p(4, "immutable", Ty::Bool),
];
const SECRET: &[F] = &[
    METADATA,
    f(2, "data", BYTES_MAP),
    f(3, "type", Ty::Str),
    f(4, "stringData", STR_MAP),
    p(5, "immutable", Ty::Bool),
];
const SERVICE_ACCOUNT: &[F] = &[
    METADATA,
    r(2, "secrets", Ty::Msg(OBJECT_REFERENCE)),
    r(3, "imagePullSecrets", Ty::Msg(LOCAL_OBJECT_REFERENCE)),
    p(4, "automountServiceAccountToken", Ty::Bool),
];
const SERVICE_PORT: &[F] = &[
    f(1, "name", Ty::Str),
    f(2, "protocol", Ty::Str),
    f(3, "port", Ty::Int),
    f(4, "targetPort", Ty::IntOrString),
    f(5, "nodePort", Ty::Int),
    p(6, "appProtocol", Ty::Str),
];
const SERVICE_SPEC: &[F] = &[
    r(1, "ports", Ty::Msg(SERVICE_PORT)),
    f(2, "selector", STR_MAP),
    f(3, "clusterIP", Ty::Str),
    f(4, "type", Ty::Str),
    r(5, "externalIPs", Ty::Str),
    f(7, "sessionAffinity", Ty::Str),
    f(8, "loadBalancerIP", Ty::Str),
    r(9, "loadBalancerSourceRanges", Ty::Str),
    f(10, "externalName", Ty::Str),
    f(11, "externalTrafficPolicy", Ty::Str),
    f(12, "healthCheckNodePort", Ty::Int),
    f(13, "publishNotReadyAddresses", Ty::Bool),
    p(17, "ipFamilyPolicy", Ty::Str),
    r(18, "clusterIPs", Ty::Str),
    r(19, "ipFamilies", Ty::Str),
    p(20, "allocateLoadBalancerNodePorts", Ty::Bool),
    p(21, "loadBalancerClass", Ty::Str),
    p(22, "internalTrafficPolicy", Ty::Str),
];
const SERVICE: &[F] = &[METADATA, f(2, "spec", Ty::Msg(SERVICE_SPEC))];

// k8s.io/api/apps/v1/generated.proto
const ROLLING_UPDATE_DEPLOYMENT: &[F] = &[
    p(1, "maxUnavailable", Ty::IntOrString),
    p(2, "maxSurge", Ty::IntOrString),
];
const DEPLOYMENT_STRATEGY: &[F] = &[
    f(1, "type", Ty::Str),
    p(2, "rollingUpdate", Ty::Msg(ROLLING_UPDATE_DEPLOYMENT)),
];
const DEPLOYMENT_SPEC: &[F] = &[
    p(1, "replicas", Ty::Int),
    p(2, "selector", Ty::Msg(LABEL_SELECTOR)),
    f(3, "template", Ty::Msg(POD_TEMPLATE_SPEC)),
    f(4, "strategy", Ty::Msg(DEPLOYMENT_STRATEGY)),
    f(5, "minReadySeconds", Ty::Int),
    p(6, "revisionHistoryLimit", Ty::Int),
    f(7, "paused", Ty::Bool),
    p(9, "progressDeadlineSeconds", Ty::Int),
];
const DEPLOYMENT: &[F] = &[METADATA, f(2, "spec", Ty::Msg(DEPLOYMENT_SPEC))];

// k8s.io/api/batch/v1/generated.proto
const JOB_SPEC: &[F] = &[
    p(1, "parallelism", Ty::Int),
    p(2, "completions", Ty::Int),
    p(3, "activeDeadlineSeconds", Ty::Int),
    p(4, "selector", Ty::Msg(LABEL_SELECTOR)),
    p(5, "manualSelector", Ty::Bool),
    f(6, "template", Ty::Msg(POD_TEMPLATE_SPEC)),
    p(7, "backoffLimit", Ty::Int),
    p(8, "ttlSecondsAfterFinished", Ty::Int),
    p(9, "completionMode", Ty::Str),
    p(10, "suspend", Ty::Bool),
    p(12, "backoffLimitPerIndex", Ty::Int),
    p(13, "maxFailedIndexes", Ty::Int),
    p(14, "podReplacementPolicy", Ty::Str),
    p(16, "managedBy", Ty::Str),
];
const JOB: &[F] = &[METADATA, f(2, "spec", Ty::Msg(JOB_SPEC))];
const JOB_TEMPLATE_SPEC: &[F] = &[METADATA, f(2, "spec", Ty::Msg(JOB_SPEC))];
const CRON_JOB_SPEC: &[F] = &[
    f(1, "schedule", Ty::Str),
    p(2, "startingDeadlineSeconds", Ty::Int),
    f(3, "concurrencyPolicy", Ty::Str),
    p(4, "suspend", Ty::Bool),
    f(5, "jobTemplate", Ty::Msg(JOB_TEMPLATE_SPEC)),
    p(6, "successfulJobsHistoryLimit", Ty::Int),
    p(7, "failedJobsHistoryLimit", Ty::Int),
    p(8, "timeZone", Ty::Str),
];
const CRON_JOB: &[F] = &[METADATA, f(2, "spec", Ty::Msg(CRON_JOB_SPEC))];

// k8s.io/api/rbac/v1/generated.proto
const POLICY_RULE: &[F] = &[
    r(1, "verbs", Ty::Str),
    r(2, "apiGroups", Ty::Str),
    r(3, "resources", Ty::Str),
    r(4, "resourceNames", Ty::Str),
    r(5, "nonResourceURLs", Ty::Str),
];
const ROLE: &[F] = &[METADATA, r(2, "rules", Ty::Msg(POLICY_RULE))];
const CLUSTER_ROLE: &[F] = &[
    METADATA,
    r(2, "rules", Ty::Msg(POLICY_RULE)),
    p(
        3,
        "aggregationRule",
        Ty::Msg(&[r(1, "clusterRoleSelectors", Ty::Msg(LABEL_SELECTOR))]),
    ),
];
const SUBJECT: &[F] = &[
    f(1, "kind", Ty::Str),
    f(2, "apiGroup", Ty::Str),
    f(3, "name", Ty::Str),
    f(4, "namespace", Ty::Str),
];
const ROLE_REF: &[F] = &[f(1, "apiGroup", Ty::Str), f(2, "kind", Ty::Str), f(3, "name", Ty::Str)];
const ROLE_BINDING: &[F] = &[
    METADATA,
    r(2, "subjects", Ty::Msg(SUBJECT)),
    f(3, "roleRef", Ty::Msg(ROLE_REF)),
];

// k8s.io/api/authorization/v1 and authentication/v1 generated.proto
const SELECTOR_REQUIREMENT: &[F] = &[f(1, "key", Ty::Str), f(2, "operator", Ty::Str), r(3, "values", Ty::Str)];
const ATTRIBUTES_SELECTOR: &[F] = &[
    f(1, "rawSelector", Ty::Str),
    r(2, "requirements", Ty::Msg(SELECTOR_REQUIREMENT)),
];
const RESOURCE_ATTRIBUTES: &[F] = &[
    f(1, "namespace", Ty::Str),
    f(2, "verb", Ty::Str),
    f(3, "group", Ty::Str),
    f(4, "version", Ty::Str),
    f(5, "resource", Ty::Str),
    f(6, "subresource", Ty::Str),
    f(7, "name", Ty::Str),
    p(8, "fieldSelector", Ty::Msg(ATTRIBUTES_SELECTOR)),
    p(9, "labelSelector", Ty::Msg(ATTRIBUTES_SELECTOR)),
];
const NON_RESOURCE_ATTRIBUTES: &[F] = &[f(1, "path", Ty::Str), f(2, "verb", Ty::Str)];
const SELF_SUBJECT_ACCESS_REVIEW: &[F] = &[
    METADATA,
    f(
        2,
        "spec",
        Ty::Msg(&[
            p(1, "resourceAttributes", Ty::Msg(RESOURCE_ATTRIBUTES)),
            p(2, "nonResourceAttributes", Ty::Msg(NON_RESOURCE_ATTRIBUTES)),
        ]),
    ),
];
const SELF_SUBJECT_RULES_REVIEW: &[F] = &[METADATA, f(2, "spec", Ty::Msg(&[f(1, "namespace", Ty::Str)]))];
const BOUND_OBJECT_REFERENCE: &[F] = &[
    f(1, "kind", Ty::Str),
    f(2, "apiVersion", Ty::Str),
    f(3, "name", Ty::Str),
    f(4, "uid", Ty::Str),
];
const TOKEN_REQUEST: &[F] = &[
    METADATA,
    f(
        2,
        "spec",
        Ty::Msg(&[
            r(1, "audiences", Ty::Str),
            p(3, "boundObjectRef", Ty::Msg(BOUND_OBJECT_REFERENCE)),
            p(4, "expirationSeconds", Ty::Int),
        ]),
    ),
];

/// The kinds kubectl 1.32's typed clients create imperatively (`kubectl create <generator>`, `auth can-i`,
/// `create token`). Status is never decoded: a create body's status is ignored by the server anyway.
fn schema_for(api_version: &str, kind: &str) -> Option<&'static [F]> {
    Some(match (api_version, kind) {
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Secret") => SECRET,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        ("v1", "Service") => SERVICE,
        ("v1", "Pod") => POD,
        ("apps/v1", "Deployment") => DEPLOYMENT,
        ("batch/v1", "Job") => JOB,
        ("batch/v1", "CronJob") => CRON_JOB,
        ("rbac.authorization.k8s.io/v1", "Role") => ROLE,
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => CLUSTER_ROLE,
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => ROLE_BINDING,
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => SELF_SUBJECT_ACCESS_REVIEW,
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => SELF_SUBJECT_RULES_REVIEW,
        ("authentication.k8s.io/v1", "SelfSubjectReview") => &[METADATA],
        ("authentication.k8s.io/v1", "TokenRequest") => TOKEN_REQUEST,
        _ => return None,
    })
}

// ---------------------------------------------------------------------------------------------------------------
// Table-driven decoding
// ---------------------------------------------------------------------------------------------------------------

fn decode_message(buf: &[u8], fields: &'static [F], depth: usize) -> Result<Map<String, Value>, String> {
    if depth > MAX_DEPTH {
        return Err("message nesting too deep".into());
    }
    let mut out = Map::new();
    let mut reader = Reader::new(buf);
    while let Some((number, wire)) = reader.field()? {
        let Some(field) = fields.iter().find(|f| f.num == number) else {
            continue;
        };
        let value = decode_value(field.ty, wire, depth).map_err(|e| format!("{}: {e}", display_name(field)))?;
        store(&mut out, field, value);
    }
    Ok(out)
}

fn display_name(field: &F) -> &'static str {
    if field.name.is_empty() {
        "(inline)"
    } else {
        field.name
    }
}

/// Place one decoded value: append for repeated, merge for maps and inlined structs, drop Go zero values
/// of non-pointer fields.
fn store(out: &mut Map<String, Value>, field: &F, value: Value) {
    match (field.ty, value) {
        (Ty::Inline(_), Value::Object(m)) => out.extend(m),
        (Ty::Map(_), Value::Object(entry)) => {
            let target = out.entry(field.name).or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(m) = target {
                m.extend(entry);
            }
        }
        (_, v) if field.repeated => {
            let target = out.entry(field.name).or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(a) = target {
                a.push(v);
            }
        }
        (_, Value::Null) => {}
        (_, v) if !field.ptr && is_zero(&v) => {}
        (_, v) => {
            out.insert(field.name.to_string(), v);
        }
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_i64() == Some(0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
    }
}

/// Decode one wire value; `Value::Null` means "unset" (e.g. a zero `Time`).
fn decode_value(ty: Ty, wire: Wire<'_>, depth: usize) -> Result<Value, String> {
    match (ty, wire) {
        (Ty::Int, Wire::Varint(v)) => Ok(Value::from(v as i64)),
        (Ty::Int, Wire::Fixed64(v)) => Ok(Value::from(v as i64)),
        (Ty::Int, Wire::Fixed32(v)) => Ok(Value::from(v as i32)),
        (Ty::Bool, Wire::Varint(v)) => Ok(Value::Bool(v != 0)),
        (Ty::Str, Wire::Bytes(b)) => Ok(Value::String(utf8(b))),
        (Ty::Bytes, Wire::Bytes(b)) => Ok(Value::String(base64::engine::general_purpose::STANDARD.encode(b))),
        (Ty::Msg(fields) | Ty::Inline(fields), Wire::Bytes(b)) => {
            Ok(Value::Object(decode_message(b, fields, depth + 1)?))
        }
        (Ty::Map(value_ty), Wire::Bytes(b)) => decode_map_entry(b, *value_ty, depth),
        (Ty::Time, Wire::Bytes(b)) => decode_time(b),
        (Ty::Quantity, Wire::Bytes(b)) => decode_quantity(b),
        (Ty::IntOrString, Wire::Bytes(b)) => decode_int_or_string(b),
        (Ty::RawJson, Wire::Bytes(b)) => decode_raw_json(b),
        (_, w) => Err(format!("unexpected wire type {}", wire_name(&w))),
    }
}

fn wire_name(w: &Wire<'_>) -> &'static str {
    match w {
        Wire::Varint(_) => "varint",
        Wire::Fixed64(_) => "fixed64",
        Wire::Bytes(_) => "length-delimited",
        Wire::Fixed32(_) => "fixed32",
    }
}

/// A map entry {1 key, 2 value} as a one-key object; a missing key or value is the proto default.
fn decode_map_entry(buf: &[u8], value_ty: Ty, depth: usize) -> Result<Value, String> {
    let mut key = String::new();
    let mut value = None;
    let mut reader = Reader::new(buf);
    while let Some((number, wire)) = reader.field()? {
        match (number, wire) {
            (1, Wire::Bytes(b)) => key = utf8(b),
            (1, _) => return Err("map key has the wrong wire type".into()),
            (2, w) => value = Some(decode_value(value_ty, w, depth + 1)?),
            _ => {}
        }
    }
    let value = match (value, value_ty) {
        (Some(v), _) => v,
        (None, Ty::Quantity) => Value::Null,
        (None, _) => Value::String(String::new()),
    };
    let mut entry = Map::new();
    entry.insert(key, value);
    Ok(Value::Object(entry))
}

/// meta/v1 `Time`; an empty message is Go's zero time (`null` in JSON), so it reads as unset.
fn decode_time(buf: &[u8]) -> Result<Value, String> {
    let (mut seconds, mut nanos) = (0i64, 0i64);
    let mut reader = Reader::new(buf);
    let mut any = false;
    while let Some((number, wire)) = reader.field()? {
        match (number, wire) {
            (1, Wire::Varint(v)) => seconds = v as i64,
            (2, Wire::Varint(v)) => nanos = i64::from(v as i32),
            (1 | 2, _) => return Err("Time field has the wrong wire type".into()),
            _ => continue,
        }
        any = true;
    }
    // Go's zero time.Time (year 1) is what a marshalled zero value would carry if it were ever sent.
    const GO_ZERO_TIME_UNIX: i64 = -62_135_596_800;
    if !any || seconds == GO_ZERO_TIME_UNIX {
        return Ok(Value::Null);
    }
    let t = DateTime::from_timestamp(seconds, nanos.clamp(0, 999_999_999) as u32).ok_or("Time out of range")?;
    Ok(Value::String(t.format("%Y-%m-%dT%H:%M:%SZ").to_string()))
}

fn decode_quantity(buf: &[u8]) -> Result<Value, String> {
    let mut out = Value::Null;
    let mut reader = Reader::new(buf);
    while let Some((number, wire)) = reader.field()? {
        match (number, wire) {
            (1, Wire::Bytes(b)) => out = Value::String(utf8(b)),
            (1, _) => return Err("Quantity has the wrong wire type".into()),
            _ => {}
        }
    }
    Ok(out)
}

/// intstr {1 type (0 int, 1 string), 2 intVal, 3 strVal}.
fn decode_int_or_string(buf: &[u8]) -> Result<Value, String> {
    let (mut is_string, mut int_val, mut str_val) = (false, 0i64, String::new());
    let mut reader = Reader::new(buf);
    while let Some((number, wire)) = reader.field()? {
        match (number, wire) {
            (1, Wire::Varint(v)) => is_string = v == 1,
            (2, Wire::Varint(v)) => int_val = i64::from(v as i32),
            (3, Wire::Bytes(b)) => str_val = utf8(b),
            (1..=3, _) => return Err("IntOrString field has the wrong wire type".into()),
            _ => {}
        }
    }
    Ok(if is_string {
        Value::String(str_val)
    } else {
        Value::from(int_val)
    })
}

/// meta/v1 `FieldsV1` {1 Raw}: the managedFields tree, already JSON.
fn decode_raw_json(buf: &[u8]) -> Result<Value, String> {
    let mut reader = Reader::new(buf);
    let mut out = Value::Object(Map::new());
    while let Some((number, wire)) = reader.field()? {
        if let (1, Wire::Bytes(b)) = (number, wire) {
            out = serde_json::from_slice(b).map_err(|e| format!("fieldsV1 is not JSON: {e}"))?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // A tiny encoder that writes what Go's gogo-protobuf marshaller writes, including the empty strings and
    // zero numbers of every non-pointer field.

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn bytes(num: u64, b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        varint(num << 3 | 2, &mut out);
        varint(b.len() as u64, &mut out);
        out.extend_from_slice(b);
        out
    }

    fn s(num: u64, v: &str) -> Vec<u8> {
        bytes(num, v.as_bytes())
    }

    fn v(num: u64, val: i64) -> Vec<u8> {
        let mut out = Vec::new();
        varint(num << 3, &mut out);
        varint(val as u64, &mut out);
        out
    }

    fn m(num: u64, parts: &[Vec<u8>]) -> Vec<u8> {
        bytes(num, &parts.concat())
    }

    fn entry(num: u64, k: &str, val: &[u8]) -> Vec<u8> {
        m(num, &[s(1, k), bytes(2, val)])
    }

    /// ObjectMeta as kubectl's typed client sends it: all strings present, empty creationTimestamp.
    fn object_meta(name: &str, namespace: &str, labels: &[(&str, &str)]) -> Vec<u8> {
        let mut parts = vec![
            s(1, name),
            s(2, ""),
            s(3, namespace),
            s(4, ""),
            s(5, ""),
            s(6, ""),
            v(7, 0),
            m(8, &[]),
        ];
        parts.extend(labels.iter().map(|(k, val)| entry(11, k, val.as_bytes())));
        parts.concat()
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut out = b"k8s\x00".to_vec();
        out.extend(m(1, &[s(1, api_version), s(2, kind)]));
        out.extend(bytes(2, raw));
        out.extend(s(3, ""));
        out.extend(s(4, ""));
        out
    }

    #[test]
    fn kubectl_create_namespace() {
        // kubectl create namespace t1
        let raw = [bytes(1, &object_meta("t1", "", &[])), m(2, &[]), m(3, &[s(1, "")])].concat();
        let got = decode(&envelope("v1", "Namespace", &raw)).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t1"}})
        );
    }

    #[test]
    fn kubectl_create_configmap_from_literal() {
        // kubectl create configmap c --from-literal=a=b (plus an empty value and binaryData from --from-file)
        let raw = [
            bytes(1, &object_meta("c", "", &[])),
            entry(2, "a", b"b"),
            entry(2, "empty", b""),
            entry(3, "bin", &[0xff, 0x00]),
        ]
        .concat();
        let got = decode(&envelope("v1", "ConfigMap", &raw)).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                   "data": {"a": "b", "empty": ""}, "binaryData": {"bin": "/wA="}})
        );
    }

    #[test]
    fn kubectl_create_secret_generic() {
        // kubectl create secret generic s --from-literal=k=v -n dev  (type left empty: the server defaults it)
        let raw = [bytes(1, &object_meta("s", "dev", &[])), entry(2, "k", b"v"), s(3, "")].concat();
        let got = decode(&envelope("v1", "Secret", &raw)).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "dev"},
                   "data": {"k": "dg=="}})
        );
        // secret tls / docker-registry carry a type; immutable is a pointer so false is kept.
        let raw = [bytes(1, &object_meta("t", "", &[])), s(3, "kubernetes.io/tls"), v(5, 0)].concat();
        let got = decode(&envelope("v1", "Secret", &raw)).unwrap();
        assert_eq!(got["type"], "kubernetes.io/tls");
        assert_eq!(got["immutable"], false);
    }

    fn kubectl_container(name: &str, image: &str, extra: &[Vec<u8>]) -> Vec<u8> {
        let mut parts = vec![s(1, name), s(2, image), s(5, "")];
        parts.extend_from_slice(extra);
        parts.extend([m(8, &[]), s(13, ""), s(14, ""), v(16, 0), v(17, 0), v(18, 0), s(20, "")]);
        parts.concat()
    }

    fn kubectl_pod_spec(container: Vec<u8>) -> Vec<u8> {
        [
            bytes(2, &container),
            s(3, ""),
            s(6, ""),
            s(8, ""),
            s(9, ""),
            s(10, ""),
            v(11, 0),
            v(12, 0),
            v(13, 0),
            s(16, ""),
            s(17, ""),
            s(19, ""),
            s(24, ""),
        ]
        .concat()
    }

    #[test]
    fn kubectl_create_deployment() {
        // kubectl create deployment d --image=nginx
        let labels = [("app", "d")];
        let spec = [
            v(1, 1),
            m(2, &[entry(1, "app", b"d")]),
            m(
                3,
                &[
                    bytes(1, &object_meta("", "", &labels)),
                    bytes(2, &kubectl_pod_spec(kubectl_container("nginx", "nginx", &[]))),
                ],
            ),
            m(4, &[s(1, "")]),
            v(5, 0),
            v(7, 0),
        ];
        let status = m(3, &[v(1, 0), v(2, 0), v(3, 0), v(4, 0), v(5, 0), v(7, 0)]);
        let raw = [bytes(1, &object_meta("d", "", &labels)), m(2, &spec), status].concat();
        let got = decode(&envelope("apps/v1", "Deployment", &raw)).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "d", "labels": {"app": "d"}},
                   "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
                            "template": {"metadata": {"labels": {"app": "d"}},
                                         "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}}})
        );
    }

    #[test]
    fn deployment_with_zero_replicas_port_and_resources() {
        // kubectl create deployment d --image=nginx:1 --replicas=0 --port=80, plus limits and a rolling update
        let port = m(6, &[s(1, ""), v(2, 0), v(3, 80), s(4, ""), s(5, "")]);
        let container = [
            s(1, "nginx"),
            s(2, "nginx:1"),
            port,
            m(8, &[m(1, &[s(1, "cpu"), m(2, &[s(1, "500m")])])]),
            m(7, &[s(1, "A"), s(2, "")]),
        ]
        .concat();
        let strategy = m(
            4,
            &[
                s(1, "RollingUpdate"),
                m(
                    2,
                    &[
                        m(1, &[v(1, 0), v(2, 0), s(3, "")]),
                        m(2, &[v(1, 1), v(2, 0), s(3, "25%")]),
                    ],
                ),
            ],
        );
        let spec = [v(1, 0), m(3, &[bytes(2, &kubectl_pod_spec(container))]), strategy].concat();
        let raw = [bytes(1, &object_meta("d", "", &[])), bytes(2, &spec)].concat();
        let got = decode(&envelope("apps/v1", "Deployment", &raw)).unwrap();
        assert_eq!(got["spec"]["replicas"], 0);
        let c = &got["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["ports"], json!([{"containerPort": 80}]));
        assert_eq!(c["resources"], json!({"limits": {"cpu": "500m"}}));
        assert_eq!(c["env"], json!([{"name": "A"}]));
        assert_eq!(
            got["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}})
        );
    }

    #[test]
    fn service_account_and_ssar() {
        let raw = bytes(1, &object_meta("bot", "ns", &[]));
        let got = decode(&envelope("v1", "ServiceAccount", &raw)).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bot", "namespace": "ns"}})
        );

        // kubectl auth can-i list pods -n default
        let attrs = [
            s(1, "default"),
            s(2, "list"),
            s(3, ""),
            s(4, ""),
            s(5, "pods"),
            s(6, ""),
            s(7, ""),
        ]
        .concat();
        let raw = [
            bytes(1, &object_meta("", "", &[])),
            m(2, &[bytes(1, &attrs)]),
            m(3, &[v(1, 0), v(2, 0), s(3, ""), s(4, "")]),
        ]
        .concat();
        let got = decode(&envelope("authorization.k8s.io/v1", "SelfSubjectAccessReview", &raw)).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "metadata": {},
                   "spec": {"resourceAttributes": {"namespace": "default", "verb": "list", "resource": "pods"}}})
        );
    }

    #[test]
    fn metadata_fields() {
        let meta = [
            s(1, "x"),
            s(2, "gen-"),
            v(7, 3),
            m(8, &[v(1, 1_795_000_000)]),
            entry(12, "note", b"hello"),
            m(13, &[s(1, "App"), s(3, "web"), s(4, "u1"), s(5, "demo/v1"), v(6, 1)]),
            s(14, "demo.example.com/cleanup"),
            m(17, &[s(1, "kubectl"), s(2, "Apply"), m(7, &[s(1, "{\"f:data\":{}}")])]),
        ]
        .concat();
        let got = decode(&envelope("v1", "ConfigMap", &bytes(1, &meta))).unwrap();
        let md = &got["metadata"];
        assert_eq!(md["generateName"], "gen-");
        assert_eq!(md["generation"], 3);
        assert_eq!(md["creationTimestamp"], "2026-11-18T11:06:40Z");
        assert_eq!(md["annotations"], json!({"note": "hello"}));
        assert_eq!(
            md["ownerReferences"],
            json!([{"kind": "App", "name": "web", "uid": "u1", "apiVersion": "demo/v1", "controller": true}])
        );
        assert_eq!(md["finalizers"], json!(["demo.example.com/cleanup"]));
        assert_eq!(
            md["managedFields"],
            json!([{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:data": {}}}])
        );
    }

    #[test]
    fn rbac_keeps_empty_strings_inside_lists() {
        // kubectl create role r --verb=get --resource=pods: apiGroups [""] means the core group.
        let rule = m(2, &[s(1, "get"), s(2, ""), s(3, "pods")]);
        let raw = [bytes(1, &object_meta("r", "", &[])), rule].concat();
        let got = decode(&envelope("rbac.authorization.k8s.io/v1", "Role", &raw)).unwrap();
        assert_eq!(
            got["rules"],
            json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}])
        );
    }

    #[test]
    fn negative_and_unknown_fields() {
        // A negative int64 (10-byte varint) and a field number no table knows are both fine.
        let mut fixed = Vec::new();
        varint(97 << 3 | 5, &mut fixed);
        fixed.extend([0; 4]);
        varint(96 << 3 | 1, &mut fixed);
        fixed.extend([0; 8]);
        let raw = [
            bytes(1, &object_meta("p", "", &[])),
            m(2, &[v(4, -1)]),
            v(99, 5),
            m(98, &[]),
            fixed,
        ]
        .concat();
        let got = decode(&envelope("v1", "Pod", &raw)).unwrap();
        assert_eq!(got["spec"]["terminationGracePeriodSeconds"], -1);
    }

    #[test]
    fn unknown_kind_is_415() {
        let err = decode(&envelope("policy/v1", "PodDisruptionBudget", &[])).unwrap_err();
        assert_eq!(err.code, 415);
        assert!(err.message.contains("PodDisruptionBudget"), "{}", err.message);
    }

    #[test]
    fn gzip_content_encoding_is_415() {
        let mut body = b"k8s\x00".to_vec();
        body.extend(m(1, &[s(1, "v1"), s(2, "ConfigMap")]));
        body.extend(s(3, "gzip"));
        assert_eq!(decode(&body).unwrap_err().code, 415);
    }

    #[test]
    fn garbage_is_400() {
        let cases: Vec<Vec<u8>> = vec![
            b"{\"kind\":\"Namespace\"}".to_vec(),
            b"k8s".to_vec(),
            b"k8s\x00".to_vec(),
            [b"k8s\x00".as_slice(), &[0x0a, 0x50, 0x01]].concat(),
            [b"k8s\x00".as_slice(), &[0xff; 11]].concat(),
            [b"k8s\x00".as_slice(), &[0x0b]].concat(),
            [b"k8s\x00".as_slice(), &[0x00, 0x01]].concat(),
            envelope("v1", "Namespace", &[0x0a, 0x05, 0x0a]),
            envelope("v1", "Namespace", &v(1, 7)),
            envelope("v1", "ConfigMap", &m(1, &[m(17, &[m(7, &[s(1, "not json")])])])),
            [
                b"k8s\x00".as_slice(),
                &[0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
            ]
            .concat(),
        ];
        for body in cases {
            let err = decode(&body).unwrap_err();
            assert_eq!(err.code, 400, "{body:?}: {}", err.message);
            assert_eq!(err.reason, "BadRequest");
        }
    }

    fn unhex(h: &str) -> Vec<u8> {
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Bodies captured from kubectl 1.32.4 against a recording HTTP listener.
    #[test]
    fn real_kubectl_1_32_bodies() {
        let cases = [
            (
                "6b3873000a0f0a02763112094e616d657370616365121a0a120a02743112001a0022002a0032003800420012001a020a001a002200",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t1"}}),
            ),
            (
                "6b3873000a0f0a0276311209436f6e6669674d6170121b0a110a016312001a0022002a0032003800420012060a01611201621a002200",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}),
            ),
            (
                "6b3873000a0c0a0276311206536563726574121d0a110a017312001a0022002a0032003800420012060a016b1201761a001a002200",
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "dg=="}}),
            ),
            (
                concat!(
                    "6b3873000a150a07617070732f7631120a4465706c6f796d656e7412a3010a1b0a016412001a0022002a003200380042",
                    "005a080a0361707012016412760801120a0a080a036170701201641a5e0a1a0a0012001a0022002a00320038004200",
                    "5a080a03617070120164124012220a056e67696e7812056e67696e782a0042006a00720080010088010090010",
                    "0a201001a00320042004a0052005800600068008201008a01009a0100c2010022020a00280038001a0c080010001800",
                    "2000280038001a002200"
                ),
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "labels": {"app": "d"}},
                       "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
                                "template": {"metadata": {"labels": {"app": "d"}},
                                             "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}}}),
            ),
            (
                concat!(
                    "6b3873000a320a17617574686f72697a6174696f6e2e6b38732e696f2f7631121753656c665375626a656374416363",
                    "657373526576696577123d0a100a0012001a0022002a00320038004200121f0a1d0a0764656661756c7412046c6973",
                    "741a0022002a04706f647332003a001a08080012001a0020001a002200"
                ),
                json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "metadata": {},
                       "spec": {"resourceAttributes": {"namespace": "default", "verb": "list", "resource": "pods"}}}),
            ),
        ];
        for (hex, want) in cases {
            assert_eq!(decode(&unhex(hex)).unwrap(), want);
        }
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(body in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = decode(&body);
            let _ = decode(&[b"k8s\x00".as_slice(), &body].concat());
        }

        #[test]
        fn decode_never_panics_inside_known_kinds(raw in proptest::collection::vec(proptest::num::u8::ANY, 0..256),
                                                  k in 0usize..4) {
            let (api, kind) = [("v1", "Namespace"), ("v1", "Secret"), ("apps/v1", "Deployment"), ("batch/v1", "CronJob")][k];
            let _ = decode(&envelope(api, kind, &raw));
        }
    }
}
