//! Shared helpers for the integration tests: start a simulator, get tokens, send raw requests
//! (hyper-util client: the workspace's one HTTP stack); waits are `cutover_testkit::eventually`.
#![allow(dead_code)]

use arm_sim::{ArmSim, ArmSimOptions};
use bytes::Bytes;
use cutover_testkit::eventually;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

pub const API: &str = "api-version=2024-03-01";
pub const RG: &str = "MC_cutover-rg_cutover_eastus";
pub const SCOPE: &str = "https://management.azure.com/.default";

/// A simulator on a preset with quick operations (the SDK still waits the 1 s Retry-After).
pub async fn start(preset: &str) -> ArmSim {
    let mut options = ArmSimOptions::preset(preset).unwrap();
    options.tuning.completion_delay_ms = 200;
    ArmSim::start(options).await.unwrap()
}

pub fn lb_path(sim: &ArmSim, lb: &str) -> String {
    format!(
        "/subscriptions/{}/resourceGroups/{RG}/providers/Microsoft.Network/loadBalancers/{lb}",
        sim.credentials().subscription_id
    )
}

pub fn pool_path(sim: &ArmSim, lb: &str, pool: &str) -> String {
    format!("{}/backendAddressPools/{pool}", lb_path(sim, lb))
}

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Value,
    pub raw: Bytes,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    pub fn detail_code(&self) -> &str {
        self.body["error"]["details"][0]["code"]
            .as_str()
            .unwrap_or("")
    }
}

#[derive(Clone)]
pub struct Raw {
    client: Client<HttpConnector, Full<Bytes>>,
    pub base: String,
}

impl Raw {
    pub fn new(sim: &ArmSim) -> Self {
        Self::with_base(sim.url())
    }

    pub fn with_base(base: &str) -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build_http(),
            base: base.to_owned(),
        }
    }

    /// Sends a request; `target` is a path (joined to the base) or an absolute URL.
    pub async fn send(
        &self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Reply {
        self.try_send(method, target, headers, body).await.unwrap()
    }

    pub async fn try_send(
        &self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<Reply, hyper_util::client::legacy::Error> {
        let url = if target.starts_with("http") {
            target.to_owned()
        } else {
            format!("{}{target}", self.base)
        };
        let mut req = http::Request::builder().method(method).uri(url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .unwrap();
        let resp = self.client.request(req).await?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let raw = resp.into_body().collect().await.unwrap().to_bytes();
        let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
        Ok(Reply {
            status,
            headers,
            body,
            raw,
        })
    }

    /// Client-secret token for the simulator's service principal.
    pub async fn token(&self, sim: &ArmSim) -> String {
        let c = sim.credentials();
        let form = format!(
            "grant_type=client_credentials&scope={SCOPE}&client_id={}&client_secret={}",
            c.client_id, c.client_secret
        );
        let r = self
            .send(
                "POST",
                &format!("/{}/oauth2/v2.0/token", c.tenant_id),
                &[("content-type", "application/x-www-form-urlencoded")],
                Some(form.into_bytes()),
            )
            .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        r.body["access_token"].as_str().unwrap().to_owned()
    }

    pub async fn get(&self, path: &str, token: &str) -> Reply {
        let target = if path.contains('?') {
            path.to_owned()
        } else {
            format!("{path}?{API}")
        };
        self.send(
            "GET",
            &target,
            &[("authorization", &format!("Bearer {token}"))],
            None,
        )
        .await
    }

    pub async fn put(
        &self,
        path: &str,
        token: &str,
        body: &Value,
        if_match: Option<&str>,
    ) -> Reply {
        let auth = format!("Bearer {token}");
        let mut h = vec![
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ];
        if let Some(m) = if_match {
            h.push(("if-match", m));
        }
        self.send(
            "PUT",
            &format!("{path}?{API}"),
            &h,
            Some(serde_json::to_vec(body).unwrap()),
        )
        .await
    }

    /// Polls an Azure-AsyncOperation URL until it reports a terminal status.
    pub async fn wait_op(&self, url: &str, token: &str) -> Value {
        eventually("the operation to end", || async {
            let r = self.get(url, token).await;
            assert_eq!(r.status, 200, "{:?}", r.body);
            (r.body["status"] != "InProgress").then_some(r.body)
        })
        .await
    }
}
