//! The API server's audit log (Metadata level, JSON lines) read back as requests: who called
//! what and what the server answered, the real counterpart of kube-sim's request log.

use std::collections::HashMap;
use std::path::Path;

/// One request, once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The HTTP method, derived from the audit verb (`get`/`list`/`watch` → GET, ...).
    pub method: String,
    /// `requestURI`: path and query as sent.
    pub path: String,
    /// The authenticated user, e.g. `system:serviceaccount:cutover:signal-svc`.
    pub user: String,
    /// `responseStatus.code` (0 for a watch still open).
    pub status: u16,
}

fn method(verb: &str) -> &'static str {
    match verb {
        "create" => "POST",
        "update" => "PUT",
        "patch" => "PATCH",
        "delete" | "deletecollection" => "DELETE",
        _ => "GET",
    }
}

/// Parses the log; a request logged at several stages appears once, at its latest stage.
pub fn read(path: &Path) -> Vec<Request> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut order: Vec<String> = Vec::new();
    let mut by_id: HashMap<String, Request> = HashMap::new();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<serde_json::Value>(line) else {
            continue; // a line being written
        };
        let id = e["auditID"].as_str().unwrap_or_default().to_owned();
        let request = Request {
            method: method(e["verb"].as_str().unwrap_or_default()).to_owned(),
            path: e["requestURI"].as_str().unwrap_or_default().to_owned(),
            user: e["user"]["username"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            status: e["responseStatus"]["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(0),
        };
        if !by_id.contains_key(&id) {
            order.push(id.clone());
        }
        by_id.insert(id, request);
    }
    order
        .into_iter()
        .filter_map(|id| by_id.remove(&id))
        .collect()
}
