//! The one error type of devcluster: every failure a client can see is an `ApiError`, which renders as a
//! Kubernetes `Status` object. Pure modules (patch, ssa, schema, protobuf, ...) return it so that
//! the HTTP layer never has to translate.

use serde_json::{json, Map, Value};

/// One entry of `details.causes[]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

impl Cause {
    pub fn new(reason: &str, message: impl Into<String>, field: impl Into<String>) -> Self {
        Cause {
            reason: reason.to_string(),
            message: message.into(),
            field: field.into(),
        }
    }
}

/// A failed request, rendered as `Status` with `status: Failure`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    /// `details.name`
    pub name: Option<String>,
    /// `details.group` (empty for core)
    pub group: Option<String>,
    /// `details.kind`: the resource *plural*
    pub kind: Option<String>,
    pub causes: Vec<Cause>,
    pub retry_after_seconds: Option<u64>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// `<resource>[.<group>]` as the real server prints it in messages.
pub fn qualified(plural: &str, group: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.to_string(),
            message: message.into(),
            name: None,
            group: None,
            kind: None,
            causes: Vec::new(),
            retry_after_seconds: None,
        }
    }

    /// Fill `details.{name,group,kind}`.
    pub fn with_details(mut self, plural: &str, group: &str, name: &str) -> Self {
        self.kind = Some(plural.to_string());
        self.group = Some(group.to_string());
        self.name = Some(name.to_string());
        self
    }

    pub fn with_causes(mut self, causes: Vec<Cause>) -> Self {
        self.causes = causes;
        self
    }

    pub fn not_found(plural: &str, group: &str, name: &str) -> Self {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", qualified(plural, group), name),
        )
        .with_details(plural, group, name)
    }

    /// 404 for a path the server does not serve at all.
    pub fn no_such_path() -> Self {
        ApiError::new(404, "NotFound", "the server could not find the requested resource")
    }

    pub fn already_exists(plural: &str, group: &str, name: &str) -> Self {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", qualified(plural, group), name),
        )
        .with_details(plural, group, name)
    }

    /// Optimistic-lock failure (stale resourceVersion, failed precondition).
    pub fn conflict(plural: &str, group: &str, name: &str) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(plural, group),
                name
            ),
        )
        .with_details(plural, group, name)
    }

    /// 409 Conflict with a custom message (server-side apply field conflicts, precondition messages).
    pub fn conflict_msg(message: impl Into<String>) -> Self {
        ApiError::new(409, "Conflict", message)
    }

    /// 422 Invalid: `<Kind>[.<group>] "<name>" is invalid: <field>: <detail>; ...`
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        let detail = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let mut e = ApiError::new(
            422,
            "Invalid",
            format!("{} \"{}\" is invalid: {}", qualified(kind, group), name, detail),
        );
        e.kind = Some(kind.to_string());
        e.group = Some(group.to_string());
        e.name = Some(name.to_string());
        e.causes = causes;
        e
    }

    /// 422 Invalid with a free-form message (JSON-patch test failures, PatchOptions validation).
    pub fn invalid_msg(message: impl Into<String>) -> Self {
        ApiError::new(422, "Invalid", message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError::new(403, "Forbidden", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        ApiError::new(405, "MethodNotAllowed", message)
    }

    pub fn not_acceptable(message: impl Into<String>) -> Self {
        ApiError::new(406, "NotAcceptable", message)
    }

    pub fn expired(message: impl Into<String>) -> Self {
        ApiError::new(410, "Expired", message)
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        ApiError::new(413, "RequestEntityTooLarge", message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        ApiError::new(415, "UnsupportedMediaType", message)
    }

    pub fn too_many_requests(retry_after: u64) -> Self {
        let mut e = ApiError::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        );
        e.retry_after_seconds = Some(retry_after);
        e
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(500, "InternalError", message)
    }

    pub fn service_unavailable(retry_after: u64) -> Self {
        let mut e = ApiError::new(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        );
        e.retry_after_seconds = Some(retry_after);
        e
    }

    /// The storage backend (etcd) cannot serve: 500 InternalError, as kube-apiserver wraps its etcd errors.
    /// Not a 503, which kube-rs retries for minutes and kubectl for ten seconds (with Retry-After) before
    /// saying anything: an outage should show at once, and controllers requeue on their own.
    pub fn storage_unavailable(detail: impl std::fmt::Display) -> Self {
        let message = format!("storage is unavailable: {detail}");
        let mut e = ApiError::new(500, "InternalError", format!("Internal error occurred: {message}"));
        e.causes = vec![Cause::new("", message, "")];
        e
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        ApiError::new(504, "Timeout", message)
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        // `StatusDetails` fields are `omitempty`, but a details object that was set stays (`"details":{}`).
        let mut details = Map::new();
        let has_details = self.name.is_some() || self.group.is_some() || self.kind.is_some();
        for (key, v) in [("name", &self.name), ("group", &self.group), ("kind", &self.kind)] {
            if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) {
                details.insert(key.into(), json!(v));
            }
        }
        if !self.causes.is_empty() {
            details.insert(
                "causes".into(),
                Value::Array(
                    self.causes
                        .iter()
                        .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                        .collect(),
                ),
            );
        }
        if let Some(r) = self.retry_after_seconds {
            details.insert("retryAfterSeconds".into(), json!(r));
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if has_details || !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
