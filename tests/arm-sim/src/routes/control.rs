//! `/_sim/...` control and observation endpoints (no auth, never on ARM paths):
//!
//! | method + path | effect |
//! |---|---|
//! | `GET /_sim/requests` | request log (JSON array of [`crate::RequestRecord`]) |
//! | `GET /_sim/effective` | effective admin-state log ([`crate::lro::EffectiveEvent`]) |
//! | `GET /_sim/pools/{lb}/{pool}` | pool snapshot ([`crate::PoolSnapshot`]) |
//! | `GET /_sim/operations/{id}` | [`crate::lro::OperationRecord`]: wire body, start and end time |
//! | `GET`/`PUT /_sim/tuning` | [`crate::faults::Tuning`] |
//! | `PUT /_sim/cadence` | `{"cadence":"azure"\|"fast"}`: retry hints of a [`crate::Cadence`] preset |
//! | `PUT /_sim/limits` | [`crate::throttle::Limits`] |
//! | `POST /_sim/faults` | [`crate::faults::FaultSpec`] |
//! | `POST /_sim/outside-write` | `{"lb","pool","entry","adminState"}` (null removes) |
//! | `POST /_sim/lb-remove` | `{"lb"}`: an outside actor deletes the LB (429 while an operation holds it) |
//! | `POST /_sim/lb-recreate` | `{"lb"}`: a removed LB is created again, no entry carrying an admin state |
//! | `GET /_sim/structure/{lb}` | `{"lb","fingerprint","changes":[...]}`: the LB's structure fingerprint and its structure-log entries |
//! | `GET /_sim/structure-log` | every [`crate::structure::StructureChange`] |
//! | `PUT /_sim/strict` | `{"strictLbStructure":bool}`: strict mode on/off |
//! | `POST /_sim/complete-operations` | completes every running operation now |
//! | `POST /_sim/expire-tokens` | expires every issued token |
//! | `GET`/`PUT /_sim/rbac` | [`crate::rbac::Rbac`]: role definitions, role and deny assignments (`roleAssignments: []` = permissive) |
//! | `POST /_sim/rbac/lockdown` | `{"resourceGroup","exemptPrincipals":[..]}`: AKS node resource group lockdown (a deny assignment); answers it |

use super::{Resp, json};
use crate::faults::{FaultSpec, Tuning};
use crate::lro::outside_write;
use crate::model::AdminState;
use crate::throttle::Limits;
use crate::{EntrySnapshot, PoolSnapshot, Shared, State};
use http::{Method, StatusCode, request::Parts};
use serde::Deserialize;
use serde_json::{Value, json as j};

fn bad(message: String) -> Resp {
    json(
        StatusCode::BAD_REQUEST,
        &j!({ "error": { "code": "BadRequest", "message": message } }),
    )
}

/// A control-call failure, rendered at the end.
#[derive(Debug)]
enum CtlError {
    Bad(String),
    Arm(Box<crate::errors::ArmError>),
}

impl CtlError {
    fn into_resp(self) -> Resp {
        match self {
            Self::Bad(m) => bad(m),
            Self::Arm(e) => json(e.status, &e.body()),
        }
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Resp {
    json(
        StatusCode::OK,
        &serde_json::to_value(v).unwrap_or(Value::Null),
    )
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, CtlError> {
    serde_json::from_slice(body).map_err(|e| CtlError::Bad(format!("invalid body: {e}")))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct OutsideWrite {
    lb: String,
    pool: String,
    entry: String,
    admin_state: Option<AdminState>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LockdownBody {
    resource_group: String,
    subscription: Option<String>,
    #[serde(default)]
    exempt_principals: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LbName {
    lb: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CadenceBody {
    cadence: crate::Cadence,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StrictBody {
    strict_lb_structure: bool,
}

/// A pool snapshot by LB name (any resource group).
pub(crate) fn snapshot(st: &State, lb: &str, pool: &str) -> Option<PoolSnapshot> {
    let key = st.store.find_lb(lb)?;
    let l = st.store.lb(&key.sub, &key.rg, &key.lb).ok()?;
    let p = l.pool(pool)?;
    Some(PoolSnapshot {
        lb: l.name.clone(),
        pool: p.name.clone(),
        etag: l.etag.clone(),
        provisioning_state: p.provisioning_state.clone(),
        locked_by: l.lock.as_ref().map(|x| x.op_id.clone()),
        entries: p
            .addresses
            .iter()
            .map(|a| EntrySnapshot {
                name: a.name.clone(),
                ip_address: a.ip_address().map(str::to_owned),
                nic_ip_configuration: a.nic_ip_configuration().map(str::to_owned),
                admin_state: a.admin_state,
                effective: a.effective,
            })
            .collect(),
    })
}

pub(crate) fn handle(shared: &Shared, parts: &Parts, body: &[u8]) -> Resp {
    let segs: Vec<&str> = parts
        .uri
        .path()
        .split('/')
        .filter(|s| !s.is_empty())
        .skip(1)
        .collect();
    let result: Result<Resp, CtlError> = (|| {
        let mut st = shared.state.lock();
        Ok(match (&parts.method, segs.as_slice()) {
            (&Method::GET, ["requests"]) => to_json(&st.requests),
            (&Method::GET, ["effective"]) => to_json(&st.ops.effective),
            (&Method::GET, ["pools", lb, pool]) => match snapshot(&st, lb, pool) {
                Some(s) => to_json(&s),
                None => json(
                    StatusCode::NOT_FOUND,
                    &j!({ "error": { "code": "NotFound", "message": format!("no pool {lb}/{pool}") } }),
                ),
            },
            (&Method::GET, ["operations", id]) => match st.ops.ops.get(*id) {
                Some(op) => to_json(&op.record()),
                None => json(
                    StatusCode::NOT_FOUND,
                    &j!({ "error": { "code": "NotFound", "message": "no such operation" } }),
                ),
            },
            (&Method::GET, ["structure", lb]) => {
                let found = st.store.find_lb(lb).and_then(|k| {
                    st.store
                        .lb(&k.sub, &k.rg, &k.lb)
                        .ok()
                        .map(|l| (l.name.clone(), l.fingerprint()))
                });
                match found {
                    Some((name, fingerprint)) => {
                        let changes: Vec<_> = st
                            .structure_log
                            .iter()
                            .filter(|c| c.lb.eq_ignore_ascii_case(&name))
                            .collect();
                        json(
                            StatusCode::OK,
                            &j!({ "lb": name, "fingerprint": fingerprint, "changes": changes }),
                        )
                    }
                    None => json(
                        StatusCode::NOT_FOUND,
                        &j!({ "error": { "code": "NotFound", "message": format!("no load balancer {lb}") } }),
                    ),
                }
            }
            (&Method::GET, ["structure-log"]) => to_json(&st.structure_log),
            (&Method::PUT, ["strict"]) => {
                let b = parse::<StrictBody>(body)?;
                st.tuning.strict_lb_structure = b.strict_lb_structure;
                to_json(&st.tuning)
            }
            (&Method::GET, ["tuning"]) => to_json(&st.tuning),
            (&Method::PUT, ["tuning"]) => {
                st.tuning = parse::<Tuning>(body)?;
                to_json(&st.tuning)
            }
            (&Method::PUT, ["cadence"]) => {
                let c = parse::<CadenceBody>(body)?;
                st.tuning = st.tuning.clone().with_cadence(c.cadence);
                to_json(&st.tuning)
            }
            (&Method::PUT, ["limits"]) => {
                let limits = parse::<Limits>(body)?;
                st.throttle.set_limits(limits);
                to_json(&st.throttle.limits())
            }
            (&Method::POST, ["faults"]) => {
                let spec = parse::<FaultSpec>(body)?;
                st.faults.apply(&spec, tokio::time::Instant::now());
                json(StatusCode::OK, &j!({}))
            }
            (&Method::POST, ["outside-write"]) => {
                let w = parse::<OutsideWrite>(body)?;
                let st = &mut *st;
                let key = st
                    .store
                    .find_lb(&w.lb)
                    .ok_or_else(|| CtlError::Bad(format!("no load balancer {}", w.lb)))?;
                outside_write(
                    &mut st.store,
                    &mut st.ops,
                    &key,
                    &w.pool,
                    &w.entry,
                    w.admin_state,
                    jiff::Timestamp::now(),
                )
                .map_err(|e| CtlError::Arm(Box::new(e)))?;
                json(StatusCode::OK, &j!({}))
            }
            (&Method::POST, ["lb-remove"]) => {
                let w = parse::<LbName>(body)?;
                st.remove_lb(&w.lb)
                    .map_err(|e| CtlError::Arm(Box::new(e)))?;
                json(StatusCode::OK, &j!({}))
            }
            (&Method::POST, ["lb-recreate"]) => {
                let w = parse::<LbName>(body)?;
                st.recreate_lb(&w.lb).map_err(CtlError::Bad)?;
                json(StatusCode::OK, &j!({}))
            }
            (&Method::POST, ["complete-operations"]) => {
                let st = &mut *st;
                let n = crate::lro::complete_running(
                    &mut st.ops,
                    &mut st.store,
                    jiff::Timestamp::now(),
                );
                json(StatusCode::OK, &j!({ "completed": n }))
            }
            (&Method::GET, ["rbac"]) => to_json(&st.rbac),
            (&Method::PUT, ["rbac"]) => {
                let rbac = parse::<crate::rbac::Rbac>(body)?;
                rbac.validate().map_err(CtlError::Bad)?;
                st.rbac = rbac;
                to_json(&st.rbac)
            }
            (&Method::POST, ["rbac", "lockdown"]) => {
                let b = parse::<LockdownBody>(body)?;
                let sub = b
                    .subscription
                    .or_else(|| st.store.subs.values().next().map(|s| s.id.clone()))
                    .unwrap_or_default();
                let deny = crate::rbac::DenyAssignment::nrg_lockdown(
                    &sub,
                    &b.resource_group,
                    b.exempt_principals,
                );
                st.rbac.deny_assignments.push(deny.clone());
                to_json(&deny)
            }
            (&Method::POST, ["expire-tokens"]) => {
                st.tokens.expire_all(jiff::Timestamp::now());
                json(StatusCode::OK, &j!({}))
            }
            _ => json(
                StatusCode::NOT_FOUND,
                &j!({ "error": { "code": "NotFound", "message": "unknown control endpoint" } }),
            ),
        })
    })();
    result.unwrap_or_else(CtlError::into_resp)
}
