//! The preflight's two access calls: the permissions API (`Microsoft.Authorization`, read) and
//! the write probe (a PUT ARM must refuse before anything changes).

use super::body::ChunkBody;
use super::client::ArmClient;
use super::error::ArmError;
use http::Method;
use serde::Deserialize;
use url::Url;

/// The permissions API's api-version (stable; azure-production.md 2.2).
pub const PERMISSIONS_API_VERSION: &str = "2022-04-01";

/// The `If-Match` of the write probe: an etag no resource ever has, so the resource provider
/// refuses the PUT with 412 once ARM has let it through.
pub const PROBE_ETAG: &str = "W/\"cutover-preflight-probe-never-matches\"";

/// One entry of the permissions API's answer: what one role assignment of the caller at the
/// scope or above grants (azure-production.md 2.3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Permission {
    #[serde(default)]
    pub actions: Vec<String>,
    #[serde(default)]
    pub not_actions: Vec<String>,
}

#[derive(Deserialize)]
struct Page {
    #[serde(default)]
    value: Vec<Permission>,
    #[serde(default, rename = "nextLink")]
    next_link: Option<String>,
}

/// How the write probe ended.
#[derive(Debug, Clone)]
pub enum Probe {
    /// 412: ARM authorized the write (role, deny assignments, linked access); the resource
    /// provider refused it on the etag. Nothing changed.
    Authorized,
    /// ARM refused it (403 and the rest).
    Refused(Box<ArmError>),
    /// 2xx: the resource provider took a PUT with an etag that cannot match (it ignores
    /// `If-Match`?). The body was the document as read, so nothing but its etag changed.
    Accepted,
}

impl ArmClient {
    /// `GET {scope}/providers/Microsoft.Authorization/permissions`, every page: what the
    /// caller's role assignments grant at `scope` (a resource group or resource id).
    pub async fn list_permissions(&self, scope: &str) -> Result<Vec<Permission>, ArmError> {
        const OP: &str = "list_permissions";
        let path = format!(
            "{}/providers/Microsoft.Authorization/permissions",
            scope.trim_end_matches('/')
        );
        let decode = |message: String| ArmError::Decode {
            op: OP,
            resource: path.clone(),
            message,
        };
        let mut url = self
            .scope()
            .endpoint
            .join(&path)
            .map_err(|e| decode(e.to_string()))?;
        url.query_pairs_mut()
            .append_pair("api-version", PERMISSIONS_API_VERSION);
        let mut out = Vec::new();
        for _ in 0..100 {
            let a = self.call(OP, Method::GET, url.clone(), None, None).await?;
            let page: Page = serde_json::from_slice(&a.body).map_err(|e| decode(e.to_string()))?;
            out.extend(page.value);
            match page.next_link.filter(|s| !s.is_empty()) {
                Some(next) => url = Url::parse(&next).map_err(|e| decode(e.to_string()))?,
                None => return Ok(out),
            }
        }
        Err(decode("more than 100 pages".into()))
    }

    /// PUTs `body` (the load balancer exactly as just read) back with an `If-Match` that
    /// cannot match: ARM checks the caller's roles, deny assignments and linked access before
    /// the resource provider sees the request, which then refuses it with 412.
    pub async fn probe_write_lb(&self, lb: &str, body: bytes::Bytes) -> Probe {
        const OP: &str = "probe_write_lb";
        let mut url = match self.scope().endpoint.join(&self.lb_id(lb)) {
            Ok(u) => u,
            Err(e) => {
                return Probe::Refused(Box::new(ArmError::Decode {
                    op: OP,
                    resource: self.lb_id(lb),
                    message: e.to_string(),
                }));
            }
        };
        url.query_pairs_mut()
            .append_pair("api-version", super::client::API_VERSION);
        let body = ChunkBody::new(vec![body]);
        match self
            .call(OP, Method::PUT, url, Some(PROBE_ETAG), Some(&body))
            .await
        {
            Ok(_) => Probe::Accepted,
            Err(e) if e.is_precondition_failed() => Probe::Authorized,
            Err(e) => Probe::Refused(Box::new(e)),
        }
    }
}
