//! Decoding of the Kubernetes protobuf envelope (`k8s\0` + runtime.Unknown) that kubectl >= 1.32 typed
//! clients POST (spec §16), for Namespace, ConfigMap, Secret, ServiceAccount and Deployment, into the JSON
//! object form the rest of devcluster works on.
//! OWNER: table helper. STUB — replace the bodies, keep the signatures.

use serde_json::Value;

use crate::error::{ApiError, ApiResult};

pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Decode one protobuf request body into a JSON object carrying `apiVersion` and `kind`. Unset strings
/// (`""`) are treated as unset. Unknown kinds answer 415 with a clear message.
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    let _ = body;
    Err(ApiError::unsupported_media_type("protobuf request bodies are not supported yet; send application/json"))
}
