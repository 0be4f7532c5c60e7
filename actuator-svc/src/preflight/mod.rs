//! `actuator-svc --preflight`: a read-only look at the configured subscription.
//!
//! Data flow: the service's own config loading and ARM client (`runtime`) → GET of every load
//! balancer cutover would manage and a LIST of the node resource group's NICs (the same calls
//! the service makes, so a refused read here is a refused read there) → [`facts`] (pure:
//! documents to plain facts) → [`classify`] (pure: findings, verdicts, the printed report) →
//! [`permissions`] (the permissions API at every scope a write needs, linked ones included;
//! with `--preflight-write-probe`, a PUT ARM must refuse before anything changes).
//! Nothing is written (the probe's PUT carries an etag that cannot match); no port is bound.
//!
//! [`watch`] runs the same permissions check inside the service, in the background.

pub mod classify;
pub mod facts;
pub mod permissions;
pub mod watch;

use crate::arm::{ArmClient, ArmError, client::API_VERSION};
use crate::config::azure_json::EnvOverrides;
use crate::config::cli::Args;
use crate::lb::index::NicMap;
use crate::metrics::Metrics;
use classify::{NicsRead, Report, Survey};
use facts::{LbFacts, LbRead, Refusal};
use std::sync::Arc;

/// The RBAC action an ARM call of ours needs.
fn action_of(op: &str) -> &'static str {
    match op {
        "list_nics" => "Microsoft.Network/networkInterfaces/read",
        _ => "Microsoft.Network/loadBalancers/read",
    }
}

/// A 401/403 as a refusal; ARM names the action in its message ("...perform action 'X'...").
fn refusal(e: &ArmError) -> Option<Refusal> {
    let ArmError::Http {
        op,
        status: status @ (401 | 403),
        code,
        message,
        ..
    } = e
    else {
        return None;
    };
    let named = message
        .split_once("perform action '")
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(action, _)| action.to_string());
    Some(Refusal {
        action: named.unwrap_or_else(|| action_of(op).to_string()),
        status: *status,
        code: code.clone(),
        message: message.clone(),
    })
}

/// What an answer says about the api-version: ARM refuses an unknown one with 400
/// `NoRegisteredProviderFound` (or `InvalidApiVersionParameter`) before anything else.
fn served(result: &Result<(), &ArmError>) -> Option<bool> {
    match result {
        Ok(()) => Some(true),
        Err(ArmError::Http {
            status: 400, code, ..
        }) if code.eq_ignore_ascii_case("NoRegisteredProviderFound")
            || code.eq_ignore_ascii_case("InvalidApiVersionParameter") =>
        {
            Some(false)
        }
        Err(ArmError::Http { status: 404, .. }) => Some(true),
        Err(_) => None,
    }
}

/// Reads everything the report needs. `lbs` are the configured load balancer names.
pub async fn survey(arm: &ArmClient, lbs: &[String]) -> Survey {
    let scope = arm.scope().clone();
    let mut s = Survey {
        subscription: scope.subscription_id.clone(),
        lb_resource_group: scope.lb_resource_group.clone(),
        api_version: API_VERSION.to_string(),
        ..Survey::default()
    };
    let note = |s: &mut Survey, v: Option<bool>| {
        if v.is_some() && s.api_version_served != Some(false) {
            s.api_version_served = v;
        }
    };
    // NICs first: the entries of standalone VMs are matched through them.
    let nics = match arm.list_nics().await {
        Ok(map) => {
            note(&mut s, Some(true));
            s.nics = Ok(map.len());
            s.nics_unreadable = map.unreadable().to_vec();
            map
        }
        Err(e) => {
            note(&mut s, served(&Err(&e)));
            s.nics = Err(match refusal(&e) {
                Some(r) => NicsRead::Refused(r),
                None => NicsRead::Failed {
                    code: e.code().to_string(),
                    message: e.to_string(),
                },
            });
            NicMap::new()
        }
    };
    for name in lbs {
        let read = match arm.get_lb(name).await {
            Ok(Some(body)) => {
                note(&mut s, Some(true));
                match facts::read_lb_doc(&body, &nics) {
                    Ok(doc) => LbRead::Found(doc),
                    Err(e) => LbRead::Failed {
                        code: "Decode".into(),
                        message: e.to_string(),
                    },
                }
            }
            Ok(None) => {
                note(&mut s, Some(true));
                LbRead::NotFound
            }
            Err(e) => {
                note(&mut s, served(&Err(&e)));
                match refusal(&e) {
                    Some(r) => LbRead::Refused(r),
                    None => LbRead::Failed {
                        code: e.code().to_string(),
                        message: e.to_string(),
                    },
                }
            }
        };
        s.lbs.push(LbFacts {
            name: name.clone(),
            managed: true,
            read,
        });
    }
    s
}

/// Runs the preflight with the service's flags: loads the config and credential exactly as
/// the service does, reads, classifies. The caller prints [`Report::text`] and exits non-zero
/// when [`Report::blocking`].
pub async fn run(args: &Args, env: &EnvOverrides) -> anyhow::Result<Report> {
    run_with(args, env, None).await
}

/// [`run`] with every Azure call over `dialer` (when given) instead of TCP.
pub async fn run_with(
    args: &Args,
    env: &EnvOverrides,
    dialer: Option<cutover_runtime::dial::Dialer>,
) -> anyhow::Result<Report> {
    let loaded = crate::bootstrap::load(args, env, dialer).await?;
    let (arm, _) = crate::bootstrap::arm_client(args, env, &loaded, Arc::new(Metrics::new()))?;
    let lbs = crate::bootstrap::managed_lbs(&loaded.cfg, &args.cluster_name);
    let survey = survey(&arm, &lbs).await;
    let mut report = classify::classify(&survey);
    let access =
        permissions::check(&arm, &lbs, args.write_strategy, args.preflight_write_probe).await;
    permissions::merge(&mut report, &access);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(op: &'static str, status: u16, code: &str, message: &str) -> ArmError {
        ArmError::Http {
            op,
            resource: "/x".into(),
            status,
            code: code.into(),
            message: message.into(),
            details: vec![],
            retry_after: None,
            trace: Default::default(),
        }
    }

    #[test]
    fn refusals_name_the_action() {
        let arm = http(
            "get_lb",
            403,
            "AuthorizationFailed",
            "The client 'c' with object id 'c' does not have authorization to perform action 'Microsoft.Network/loadBalancers/read' over scope '/s' or the scope is invalid.",
        );
        let r = refusal(&arm).unwrap();
        assert_eq!(r.action, "Microsoft.Network/loadBalancers/read");
        assert_eq!((r.status, r.code.as_str()), (403, "AuthorizationFailed"));
        let bare = refusal(&http("list_nics", 403, "Forbidden", "")).unwrap();
        assert_eq!(bare.action, "Microsoft.Network/networkInterfaces/read");
        assert!(refusal(&http("get_lb", 500, "InternalServerError", "")).is_none());
    }

    #[test]
    fn api_version_refusals_are_told_apart() {
        let e = http("get_lb", 400, "NoRegisteredProviderFound", "");
        assert_eq!(served(&Err(&e)), Some(false));
        assert_eq!(
            served(&Err(&http("get_lb", 404, "ResourceNotFound", ""))),
            Some(true)
        );
        assert_eq!(
            served(&Err(&http("get_lb", 403, "AuthorizationFailed", ""))),
            None
        );
        assert_eq!(served(&Ok(())), Some(true));
    }
}
