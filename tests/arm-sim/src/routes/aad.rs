//! Identity endpoints: Azure AD v2 token endpoint (client secret and federated assertion),
//! OIDC discovery (MSAL, used by the Python SDK, reads it first), the App Service managed-identity
//! endpoint (`/msi/token`, `X-IDENTITY-HEADER`) and the IMDS path
//! (`/metadata/identity/oauth2/token`, `Metadata: true`). Response fields are the real services'
//! (contracts/arm.md 5) and what azure_identity 1.x reads: numeric `expires_in`/`ext_expires_in`
//! from AAD, string `expires_on` from managed identity. A user-assigned identity is named by
//! `client_id` or `msi_res_id` (or `object_id`); one that is not the simulated identity gets
//! IMDS's 400 "Identity not found".

use super::{Outcome, delay, json, query_param};
use crate::Shared;
use crate::errors::{AadError, ArmError};
use http::{Method, StatusCode, request::Parts};
use serde_json::json as j;
use std::collections::HashMap;
use std::sync::Arc;

const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

pub(crate) async fn handle(shared: &Arc<Shared>, parts: &Parts, body: &[u8]) -> Outcome {
    let path = parts.uri.path();
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match (&parts.method, segs.as_slice()) {
        (&Method::POST, [tenant, "oauth2", "v2.0", "token"]) => token(shared, tenant, body).await,
        (&Method::GET, [tenant, "v2.0", ".well-known", "openid-configuration"])
        | (&Method::GET, [tenant, ".well-known", "openid-configuration"]) => {
            Outcome::plain(oidc(shared, tenant))
        }
        (&Method::GET, ["msi", "token"]) => managed_identity(shared, parts, true).await,
        (&Method::GET, ["metadata", "identity", "oauth2", "token"]) => {
            managed_identity(shared, parts, false).await
        }
        _ => Outcome::plain(super::arm_error(&ArmError::path_not_found(path))),
    }
}

fn aad_error(e: &AadError) -> Outcome {
    Outcome::plain(json(e.status, &e.body(&jiff::Timestamp::now().to_string())))
}

fn oidc(shared: &Shared, tenant: &str) -> super::Resp {
    let base = &shared.base_url;
    json(
        StatusCode::OK,
        &j!({
            "token_endpoint": format!("{base}/{tenant}/oauth2/v2.0/token"),
            "authorization_endpoint": format!("{base}/{tenant}/oauth2/v2.0/authorize"),
            "device_authorization_endpoint": format!("{base}/{tenant}/oauth2/v2.0/devicecode"),
            "issuer": format!("{base}/{tenant}/v2.0"),
            "jwks_uri": format!("{base}/{tenant}/discovery/v2.0/keys"),
            "token_endpoint_auth_methods_supported": ["client_secret_post", "private_key_jwt", "client_secret_basic"],
            "response_types_supported": ["code", "id_token", "code id_token", "id_token token"],
            "tenant_region_scope": "NA",
        }),
    )
}

async fn token(shared: &Arc<Shared>, tenant: &str, body: &[u8]) -> Outcome {
    let latency = shared.state.lock().tuning.latency_ms.token;
    delay(latency).await;
    let form: HashMap<String, String> = url::form_urlencoded::parse(body).into_owned().collect();
    let client_id = form.get("client_id").cloned().unwrap_or_default();
    let mut out = match check_token_request(shared, tenant, &form) {
        Ok(()) => {
            let lifetime = shared.state.lock().tuning.token_lifetime_secs;
            let (tok, _) = {
                let mut st = shared.state.lock();
                let issued = st
                    .tokens
                    .issue(&client_id, lifetime, jiff::Timestamp::now());
                let scope = form.get("scope").map(String::as_str).unwrap_or_default();
                st.tokens.set_audience(&issued.0, scope);
                issued
            };
            Outcome::plain(json(
                StatusCode::OK,
                &j!({
                    "token_type": "Bearer",
                    "expires_in": lifetime,
                    "ext_expires_in": lifetime,
                    "access_token": tok,
                }),
            ))
        }
        Err(e) => aad_error(&e),
    };
    if !client_id.is_empty() {
        out.principal = Some(client_id);
    }
    out
}

fn check_token_request(
    shared: &Shared,
    tenant: &str,
    form: &HashMap<String, String>,
) -> Result<(), AadError> {
    if !tenant.eq_ignore_ascii_case(&shared.tenant_id) {
        return Err(AadError::unknown_tenant(tenant));
    }
    let grant = form
        .get("grant_type")
        .ok_or_else(|| AadError::invalid_request("grant_type"))?;
    if grant != "client_credentials" {
        return Err(AadError::unsupported_grant(grant));
    }
    let scope = form
        .get("scope")
        .ok_or_else(|| AadError::invalid_request("scope"))?;
    if !scope.split(' ').all(|s| s.ends_with("/.default")) {
        return Err(AadError::invalid_scope(scope));
    }
    let client_id = form
        .get("client_id")
        .ok_or_else(|| AadError::invalid_request("client_id"))?;
    if !client_id.eq_ignore_ascii_case(&shared.client_id) {
        return Err(AadError::unknown_client(client_id, tenant));
    }
    if let Some(assertion) = form.get("client_assertion") {
        if form.get("client_assertion_type").map(String::as_str) != Some(JWT_BEARER) {
            return Err(AadError::invalid_request("client_assertion_type"));
        }
        if *assertion != shared.federated_token {
            return Err(AadError::invalid_assertion());
        }
        return Ok(());
    }
    let secret = form
        .get("client_secret")
        .ok_or_else(|| AadError::invalid_request("client_assertion' or 'client_secret"))?;
    if *secret != shared.client_secret {
        return Err(AadError::invalid_client_secret(client_id));
    }
    Ok(())
}

async fn managed_identity(shared: &Arc<Shared>, parts: &Parts, app_service: bool) -> Outcome {
    let latency = shared.state.lock().tuning.latency_ms.token;
    delay(latency).await;
    let header = |n: &str| {
        parts
            .headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let bad = |status: StatusCode, error: &str, description: &str| {
        Outcome::plain(json(
            status,
            &j!({ "error": error, "error_description": description }),
        ))
    };
    if app_service {
        if header("x-identity-header").as_deref() != Some(shared.identity_header.as_str()) {
            return bad(
                StatusCode::UNAUTHORIZED,
                "invalid_request",
                "The X-IDENTITY-HEADER is missing or invalid.",
            );
        }
    } else if header("metadata").as_deref() != Some("true") {
        return bad(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "Required metadata header not specified",
        );
    }
    let Some(resource) = query_param(&parts.uri, "resource") else {
        return bad(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "Required query variable 'resource' is missing",
        );
    };
    if query_param(&parts.uri, "api-version").is_none() {
        return bad(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "Required query variable 'api-version' is missing",
        );
    }
    let mi = &shared.managed_identity_client_id;
    let other = |param: &str, ours: &str| {
        query_param(&parts.uri, param).is_some_and(|v| !v.eq_ignore_ascii_case(ours))
    };
    if other("client_id", mi)
        || other("msi_res_id", &shared.managed_identity_resource_id)
        || other("object_id", &shared.managed_identity_object_id)
    {
        return bad(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "Identity not found",
        );
    }
    let now = jiff::Timestamp::now();
    let lifetime = shared.state.lock().tuning.token_lifetime_secs;
    let (tok, expires_at) = {
        let mut st = shared.state.lock();
        let issued = st.tokens.issue(mi, lifetime, now);
        st.tokens.set_audience(&issued.0, &resource);
        issued
    };
    let mut out = Outcome::plain(json(
        StatusCode::OK,
        &j!({
            "access_token": tok,
            "refresh_token": "",
            "expires_in": lifetime.to_string(),
            "expires_on": expires_at.as_second().to_string(),
            "not_before": now.as_second().to_string(),
            "resource": resource,
            "token_type": "Bearer",
            "client_id": mi,
        }),
    ));
    out.principal = Some(mi.clone());
    out
}
