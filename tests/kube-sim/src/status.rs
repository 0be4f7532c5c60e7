//! `Status` bodies exactly as kube-apiserver writes them (apimachinery `pkg/api/errors`), so a
//! client's error classification (`is_not_found`, `is_conflict`, 410 handling) sees what it
//! would see against a real cluster. The HTTP status always equals `code`.

use serde_json::{Map, Value, json};

/// A failed request: the HTTP code and the `Status` object sent as the body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
    /// Seconds for a `Retry-After` header (429 and 503 only).
    pub retry_after: Option<u32>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// A resource as named in messages and `details`: `nodes`, `events.events.k8s.io`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resource {
    pub group: &'static str,
    pub plural: &'static str,
}

impl Resource {
    /// `nodes` for the core group, `leases.coordination.k8s.io` otherwise.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// One field error, as `field.Error` renders it (`spec.taints[0].effect: Unsupported value: ...`).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// `FieldValueRequired`, `FieldValueInvalid`, ... (the cause `reason`).
    pub kind: &'static str,
    pub field: String,
    /// Everything after `field: `.
    pub body: String,
}

impl FieldError {
    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        let body = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        FieldError {
            kind: "FieldValueRequired",
            field: field.into(),
            body,
        }
    }

    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        FieldError {
            kind: "FieldValueForbidden",
            field: field.into(),
            body: format!("Forbidden: {detail}"),
        }
    }

    /// `Invalid value: <value>: detail`; strings are quoted, numbers and booleans are not.
    pub fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> Self {
        let mut body = format!("Invalid value: {}", render_value(value));
        if !detail.is_empty() {
            body.push_str(": ");
            body.push_str(detail);
        }
        FieldError {
            kind: "FieldValueInvalid",
            field: field.into(),
            body,
        }
    }

    pub fn not_supported(field: impl Into<String>, value: &Value, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        FieldError {
            kind: "FieldValueNotSupported",
            field: field.into(),
            body: format!(
                "Unsupported value: {}: supported values: {}",
                render_value(value),
                list.join(", ")
            ),
        }
    }

    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        FieldError {
            kind: "FieldValueTooLong",
            field: field.into(),
            body: format!("Too long: may not be more than {max} bytes"),
        }
    }

    fn rendered(&self) -> String {
        format!("{}: {}", self.field, self.body)
    }
}

fn render_value(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// 401, for a bearer token the server does not know.
    pub fn unauthorized() -> Self {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 with the authorizer's message (see `auth::rbac::forbidden`).
    pub fn forbidden(message: String, details: Value) -> Self {
        ApiError::new(403, "Forbidden", message).with_details(details)
    }

    /// 406 for an Accept header naming no media type this endpoint serves.
    pub fn not_acceptable(supported: &[&str]) -> Self {
        ApiError::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: {}",
                supported.join(", ")
            ),
        )
    }

    /// 404 `nodes "x" not found`.
    pub fn not_found(resource: Resource, name: &str) -> Self {
        ApiError::new(
            404,
            "NotFound",
            format!("{} {name:?} not found", resource.qualified()),
        )
        .with_details(details(resource, name))
    }

    /// 404 for a path no resource lives at (the real server answers `404 page not found`
    /// as plain text for unknown paths; for unknown resources under a known group it is a
    /// Status with an empty message). We always send a Status so clients parse it.
    pub fn path_not_found() -> Self {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// 409 `AlreadyExists` for a POST of an existing name.
    pub fn already_exists(resource: Resource, name: &str) -> Self {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} {name:?} already exists", resource.qualified()),
        )
        .with_details(details(resource, name))
    }

    /// 409 `Conflict` for a stale `resourceVersion` (or mismatched uid) precondition.
    pub fn conflict(resource: Resource, name: &str) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again",
                resource.qualified()
            ),
        )
        .with_details(details(resource, name))
    }

    /// 409 `Conflict` for a failed delete precondition.
    pub fn precondition_failed(resource: Resource, name: &str, detail: &str) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: {detail}",
                resource.qualified()
            ),
        )
        .with_details(details(resource, name))
    }

    /// 422 `Invalid`: `Kind.group "name" is invalid: field: ...` with one cause per error.
    pub fn invalid(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> Self {
        let qualified_kind = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let rendered: Vec<String> = errors.iter().map(FieldError::rendered).collect();
        let message = match rendered.len() {
            0 => format!("{qualified_kind} {name:?} is invalid"),
            1 => format!("{qualified_kind} {name:?} is invalid: {}", rendered[0]),
            _ => format!(
                "{qualified_kind} {name:?} is invalid: [{}]",
                rendered.join(", ")
            ),
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({"reason": e.kind, "message": e.body, "field": e.field}))
            .collect();
        let mut d = Map::new();
        if !name.is_empty() {
            d.insert("name".into(), json!(name));
        }
        if !group.is_empty() {
            d.insert("group".into(), json!(group));
        }
        d.insert("kind".into(), json!(kind));
        d.insert("causes".into(), Value::Array(causes));
        ApiError::new(422, "Invalid", message).with_details(Value::Object(d))
    }

    /// 422 for a JSON patch that cannot be applied (failed `test`, bad path).
    pub fn patch_rejected(cause: &str) -> Self {
        ApiError::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        )
        .with_details(json!({"causes": [{"reason": "UnexpectedServerResponse", "message": cause}]}))
    }

    /// 400 `BadRequest` with free text.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    /// 410 `Expired` (continue token or list RV older than the retained history).
    pub fn expired(message: impl Into<String>) -> Self {
        ApiError::new(410, "Expired", message)
    }

    /// 405 for a verb the resource does not support.
    pub fn method_not_supported(resource: Resource, verb: &str) -> Self {
        ApiError::new(
            405,
            "MethodNotAllowed",
            format!(
                "{verb} is not supported on resources of kind {:?}",
                resource.qualified()
            ),
        )
        .with_details(json!({"group": resource.group, "kind": resource.plural}))
    }

    /// 415 for a body in a media type the endpoint does not accept.
    pub fn unsupported_media_type(content_type: &str, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                list.join(", ")
            ),
        )
        .with_details(json!({"causes": [{"reason": "UnexpectedServerResponse", "message": content_type}]}))
    }

    /// 504 for `resourceVersion` newer than anything the server has seen.
    pub fn too_large_resource_version(requested: u64, current: u64) -> Self {
        ApiError::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
        )
        .with_details(json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}))
    }

    /// Injected faults: 429 `TooManyRequests`, 500 `InternalError`, 503 `ServiceUnavailable`,
    /// 504 `Timeout`; anything else keeps the code with reason `Unknown`.
    pub fn injected(code: u16, retry_after: Option<u32>) -> Self {
        let mut e = match code {
            429 => ApiError::new(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
            )
            .with_details(json!({"retryAfterSeconds": retry_after.unwrap_or(1)})),
            500 => ApiError::new(
                500,
                "InternalError",
                "Internal error occurred: injected fault",
            )
            .with_details(json!({"causes": [{"message": "injected fault"}]})),
            503 => ApiError::new(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
            504 => ApiError::new(
                504,
                "Timeout",
                "the server was unable to return a response in the time allotted, but may still be processing the request",
            ),
            other => ApiError::new(other, "Unknown", "injected fault"),
        };
        if matches!(code, 429 | 503) {
            e.retry_after = Some(retry_after.unwrap_or(1));
        }
        e
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut s = Map::new();
        s.insert("kind".into(), json!("Status"));
        s.insert("apiVersion".into(), json!("v1"));
        s.insert("metadata".into(), json!({}));
        s.insert("status".into(), json!("Failure"));
        s.insert("message".into(), json!(self.message));
        s.insert("reason".into(), json!(self.reason));
        if let Some(d) = &self.details {
            s.insert("details".into(), d.clone());
        }
        s.insert("code".into(), json!(self.code));
        Value::Object(s)
    }
}

fn details(resource: Resource, name: &str) -> Value {
    let mut d = Map::new();
    d.insert("name".into(), json!(name));
    if !resource.group.is_empty() {
        d.insert("group".into(), json!(resource.group));
    }
    d.insert("kind".into(), json!(resource.plural));
    Value::Object(d)
}

/// The `Status` a successful DELETE returns for an object removed at once.
pub fn delete_success(resource: Resource, name: &str, uid: &str) -> Value {
    let mut d = details(resource, name);
    if let Some(m) = d.as_object_mut() {
        m.insert("uid".into(), json!(uid));
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d})
}

/// The watch ERROR for a too-old resourceVersion: watch-cache wording for cached resources,
/// etcd wording for events (served uncached, contracts/kube.md 2.4).
pub fn watch_too_old(cached: bool, requested: u64, oldest: u64) -> ApiError {
    if cached {
        ApiError::expired(format!("too old resource version: {requested} ({oldest})"))
    } else {
        ApiError::expired("The resourceVersion for the provided watch is too old.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: Resource = Resource {
        group: "",
        plural: "nodes",
    };

    #[test]
    fn not_found_matches_the_real_body() {
        let s = ApiError::not_found(NODES, "aks-x").to_status();
        assert_eq!(
            s,
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                "message":"nodes \"aks-x\" not found","reason":"NotFound",
                "details":{"name":"aks-x","kind":"nodes"},"code":404})
        );
    }

    #[test]
    fn invalid_lists_every_cause_in_brackets() {
        let e = ApiError::invalid(
            "",
            "Node",
            "n",
            &[
                FieldError::required("metadata.name", ""),
                FieldError::not_supported("spec.taints[0].effect", &json!("Bad"), &["A", "B"]),
            ],
        );
        assert_eq!(
            e.message,
            "Node \"n\" is invalid: [metadata.name: Required value, spec.taints[0].effect: Unsupported value: \"Bad\": supported values: \"A\", \"B\"]"
        );
    }
}
