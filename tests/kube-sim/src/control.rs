//! Fault-injection and inspection endpoints under `/_sim/` (never on Kubernetes paths, never
//! logged, never subject to injected faults):
//!
//! | request | effect |
//! |---|---|
//! | `POST /_sim/watches/close` | end every open watch cleanly (clients re-watch from their RV) |
//! | `POST /_sim/watches/pause` | hold new watch requests (open watches continue) |
//! | `POST /_sim/watches/resume` | serve held and new watch requests |
//! | `POST /_sim/compact` | forget history: older RVs give 410 on watch, exact list and continue |
//! | `PUT /_sim/latency` `{"ms": 250}` | delay every Kubernetes request |
//! | `POST /_sim/fail` `{"status": 503, "count": 3, "pathPrefix": "/api/v1/nodes", "verb": "GET"}` | fail the next N matching requests (`verb`: an HTTP method, `WATCH` or `LIST`) |
//! | `DELETE /_sim/fail` | drop pending failures |
//! | `GET /_sim/requests` | the request log: `[{"method","path","status"}]`, path with query |
//! | `DELETE /_sim/requests` | clear the log |
//! | `GET /_sim/rv` | `{"resourceVersion": "N"}`, the current global RV |
//! | `GET /_sim/conditions[?type=T]` | every change of a Node condition's status or reason, stamped when committed: `[{"at","node","type","status","reason"}]` (status `""`: removed) |

use crate::faults::FailRule;
use crate::server::{Body, Req, Shared, error_response, json_response};
use crate::status::ApiError;
use http::{Method, Response};
use serde_json::json;
use std::time::Duration;

impl Shared {
    /// Ends every open watch.
    pub fn close_all_watches(&self) {
        self.close_watches.send_modify(|g| *g += 1);
    }

    /// Drops all history and paging snapshots.
    pub fn compact(&self) {
        let mut state = self.state.lock();
        state.store.compact();
        let floor = state.store.oldest_rv();
        state.pager.compact(floor);
    }
}

/// Serves one control request.
pub fn handle(shared: &Shared, path: &str, req: &Req) -> Response<Body> {
    let ok = || json_response(200, &json!({"ok": true}));
    match (&req.method, path) {
        (&Method::POST, "watches/close") => {
            shared.close_all_watches();
            ok()
        }
        (&Method::POST, "watches/pause") => {
            shared.watches_paused.send_replace(true);
            ok()
        }
        (&Method::POST, "watches/resume") => {
            shared.watches_paused.send_replace(false);
            ok()
        }
        (&Method::POST, "compact") => {
            shared.compact();
            ok()
        }
        (&Method::PUT | &Method::POST, "latency") => {
            match serde_json::from_slice::<serde_json::Value>(&req.body)
                .ok()
                .and_then(|v| v["ms"].as_u64())
            {
                Some(ms) => {
                    shared.faults.lock().set_latency(Duration::from_millis(ms));
                    ok()
                }
                None => error_response(&ApiError::bad_request("expected {\"ms\": <integer>}")),
            }
        }
        (&Method::GET, "latency") => json_response(
            200,
            &json!({"ms": shared.faults.lock().latency().as_millis() as u64}),
        ),
        (&Method::POST, "fail") => match serde_json::from_slice::<FailRule>(&req.body) {
            Ok(rule) => {
                shared.faults.lock().add_rule(rule);
                ok()
            }
            Err(e) => error_response(&ApiError::bad_request(format!("bad fail rule: {e}"))),
        },
        (&Method::DELETE, "fail") => {
            shared.faults.lock().clear_rules();
            ok()
        }
        (&Method::GET, "requests") => {
            let log = shared.faults.lock().requests();
            json_response(200, &serde_json::to_value(log).unwrap_or_default())
        }
        (&Method::DELETE, "requests") => {
            shared.faults.lock().clear_requests();
            ok()
        }
        (&Method::GET, "conditions") => {
            let kind = req.param("type");
            let log = shared.state.lock().store.conditions().of_type(kind);
            json_response(200, &serde_json::to_value(log).unwrap_or_default())
        }
        (&Method::GET, "rv") => json_response(
            200,
            &json!({"resourceVersion": shared.state.lock().store.current_rv().to_string()}),
        ),
        _ => error_response(&ApiError::path_not_found()),
    }
}
