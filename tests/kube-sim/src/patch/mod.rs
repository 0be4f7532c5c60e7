//! PATCH bodies by content type: JSON merge patch, strategic merge patch, JSON patch
//! (RFC 6902, via the `json-patch` crate) and a minimal server-side apply.
//!
//! Server-side apply here is a merge of the applied configuration into the live object
//! (creating it when missing). It does NOT track `managedFields`, so it never reports
//! field-ownership conflicts and never removes fields a manager stopped applying.

pub mod merge;
pub mod strategic;

use crate::status::ApiError;
use serde_json::Value;

/// The four patch media types kube-apiserver accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Strategic,
    Json,
    Apply,
}

/// Accepted media types, in the order the real server lists them in a 415.
pub const PATCH_MEDIA_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

impl PatchType {
    /// The patch type for a `Content-Type` header value (parameters ignored).
    pub fn from_content_type(content_type: &str) -> Option<PatchType> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        match media.to_ascii_lowercase().as_str() {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

/// Applies `body` (of `patch_type`) to `current`, returning the patched object.
pub fn apply(current: &Value, body: &[u8], patch_type: PatchType) -> Result<Value, ApiError> {
    let mut target = current.clone();
    match patch_type {
        PatchType::Merge => {
            let patch = decode_json(body)?;
            merge::apply(&mut target, &patch);
        }
        PatchType::Strategic => {
            let patch = decode_json(body)?;
            strategic::apply(&mut target, &patch)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
        }
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            json_patch::patch(&mut target, &ops)
                .map_err(|e| ApiError::patch_rejected(&json_patch_message(&e)))?;
        }
        PatchType::Apply => {
            let patch = decode_yaml(body)?;
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding YAML: the applied configuration must be an object",
                ));
            }
            merge::apply(&mut target, &patch);
        }
    }
    if !target.is_object() {
        return Err(ApiError::bad_request(
            "the patched object is not a JSON object",
        ));
    }
    Ok(target)
}

fn json_patch_message(e: &json_patch::PatchError) -> String {
    match e.kind {
        json_patch::PatchErrorKind::TestFailed => {
            format!("testing value {} failed: test failed", e.path)
        }
        _ => format!("{} at operation {} ({})", e.kind, e.operation, e.path),
    }
}

fn decode_json(body: &[u8]) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "error decoding patch: the patch must be a JSON object",
        ));
    }
    Ok(v)
}

/// YAML is a superset of JSON, so this takes either (apply bodies from kube are JSON).
fn decode_yaml(body: &[u8]) -> Result<Value, ApiError> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    serde_yaml::from_slice::<Value>(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_patch_test_failure_is_422() {
        let cur = json!({"metadata": {"resourceVersion": "5"}});
        let body = br#"[{"op":"test","path":"/metadata/resourceVersion","value":"4"},
                         {"op":"add","path":"/spec","value":{}}]"#;
        let err = apply(&cur, body, PatchType::Json).unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(err.reason, "Invalid");
        let ok = br#"[{"op":"test","path":"/metadata/resourceVersion","value":"5"},
                      {"op":"add","path":"/spec","value":{"taints":[]}},
                      {"op":"add","path":"/spec/taints/-","value":{"key":"k"}}]"#;
        let out = apply(&cur, ok, PatchType::Json).unwrap();
        assert_eq!(out["spec"]["taints"], json!([{"key": "k"}]));
    }

    #[test]
    fn malformed_bodies_are_400() {
        let cur = json!({});
        for (body, t) in [
            (&b"{nope"[..], PatchType::Merge),
            (b"[1]", PatchType::Merge),
            (b"\"x\"", PatchType::Strategic),
            (b"{\"op\":\"add\"}", PatchType::Json),
            (
                b"[{\"op\":\"frobnicate\",\"path\":\"/a\"}]",
                PatchType::Json,
            ),
            (b"- a\n- b", PatchType::Apply),
            (b"a: [", PatchType::Apply),
        ] {
            let e = apply(&cur, body, t).unwrap_err();
            assert_eq!(e.code, 400, "{body:?} {t:?}");
        }
    }

    #[test]
    fn apply_accepts_yaml() {
        let out = apply(
            &json!({"a": 1}),
            b"spec:\n  holderIdentity: me\n",
            PatchType::Apply,
        )
        .unwrap();
        assert_eq!(out, json!({"a": 1, "spec": {"holderIdentity": "me"}}));
    }
}
