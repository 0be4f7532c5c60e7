//! ARM's metadata endpoint, `GET /metadata/endpoints?api-version=...`: the endpoints of the
//! cloud this ARM belongs to, which clients of a custom cloud (Azure Stack Hub, a private ARM)
//! read at start (cloud-provider-azure's azure.json `resourceManagerEndpoint`,
//! azure-production.md section 3 fact 2). No token is needed.
//!
//! The simulator's cloud is itself: `resourceManager` is its base URL, the Entra authority
//! (`authentication.loginEndpoint`) its https URL, and `authentication.audiences` those its ARM
//! accepts ([`crate::ArmSim::set_accepted_audiences`]), else its base URL. Two shapes, as
//! clients read them: `2022-09-01` answers one cloud object (hashicorp/go-azure-sdk's metadata
//! client), every other version a list of clouds (`2019-05-01`, cloud-provider-azure's
//! `AzureCloudConfigFromURL`; Azure's own lists every public and sovereign cloud, here there is
//! one). Only the fields those clients read, and `name`, are served.

use super::{Outcome, json, query_param};
use crate::Shared;
use crate::errors::ArmError;
use http::{Method, StatusCode, request::Parts};
use serde_json::json as j;

/// The cloud's name in the document.
pub const NAME: &str = "ArmSim";

pub(crate) fn handle(shared: &Shared, parts: &Parts) -> Outcome {
    if parts.method != Method::GET {
        return Outcome::plain(super::arm_error(&ArmError::method_not_allowed(
            parts.method.as_str(),
        )));
    }
    let Some(version) = query_param(&parts.uri, "api-version") else {
        return Outcome::plain(super::arm_error(&ArmError::missing_api_version()));
    };
    let base = shared.base_url.trim_end_matches('/');
    let https = match base.strip_prefix("http://") {
        Some(rest) => format!("https://{rest}"),
        None => base.to_owned(),
    };
    let audiences = shared
        .state
        .lock()
        .tokens
        .accepted_audiences()
        .map(<[String]>::to_vec)
        .unwrap_or_else(|| vec![format!("{base}/")]);
    let cloud = j!({
        "name": NAME,
        "resourceManager": format!("{base}/"),
        "authentication": {
            "loginEndpoint": format!("{https}/"),
            "audiences": audiences,
            "tenant": "common",
            "identityProvider": "AAD",
        },
        "portal": format!("{https}/portal"),
        "suffixes": {},
    });
    let body = if version == "2022-09-01" {
        cloud
    } else {
        j!([cloud])
    };
    Outcome::plain(json(StatusCode::OK, &body))
}
