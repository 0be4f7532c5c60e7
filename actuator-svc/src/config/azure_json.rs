//! The cloud-provider-azure `azure.json` (`--cloud-config`), read the way cloud-provider-azure
//! reads it (`shared/contracts/arm.md` section 6, `peers.md` C.6-C.7).
//!
//! Pure: the file's text and the environment come in as arguments. Unknown fields are tolerated
//! (real files carry dozens we do not use); a field we use with the wrong type or an
//! inconsistent combination is an error naming the field.

use serde_json::{Map, Value};
use std::fmt;

/// A broken `azure.json`, naming the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AzureJsonError {
    #[error("cloud config is not a JSON object: {0}")]
    NotJson(String),
    #[error("{field}: {problem}")]
    Field { field: String, problem: String },
}

fn bad(field: &str, problem: impl Into<String>) -> AzureJsonError {
    AzureJsonError::Field {
        field: field.to_string(),
        problem: problem.into(),
    }
}

/// How backend pools reference nodes (`loadBalancerBackendPoolConfigurationType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolConfigType {
    /// NIC-based pools (the default).
    NodeIpConfiguration,
    /// IP-based pools.
    NodeIp,
}

/// A client-side token bucket (`cloudProviderRateLimit*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    pub read_qps: f64,
    pub read_bucket: u32,
    pub write_qps: f64,
    pub write_bucket: u32,
}

/// The credential to use, chosen with cloud-provider-azure's precedence: federated workload
/// identity, then managed identity, then client secret. Debug output redacts the secret.
#[derive(Clone, PartialEq, Eq)]
pub enum CredentialChoice {
    WorkloadIdentity {
        client_id: String,
        token_file: String,
    },
    ManagedIdentity {
        /// `userAssignedIdentityID`: the client ID or the ARM resource ID of a user-assigned
        /// identity; `None` for the system-assigned one.
        user_assigned_id: Option<String>,
    },
    ClientSecret {
        client_id: String,
        secret: String,
    },
}

impl fmt::Debug for CredentialChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WorkloadIdentity {
                client_id,
                token_file,
            } => f
                .debug_struct("WorkloadIdentity")
                .field("client_id", client_id)
                .field("token_file", token_file)
                .finish(),
            Self::ManagedIdentity { user_assigned_id } => f
                .debug_struct("ManagedIdentity")
                .field("user_assigned_id", user_assigned_id)
                .finish(),
            Self::ClientSecret { client_id, .. } => f
                .debug_struct("ClientSecret")
                .field("client_id", client_id)
                .field("secret", &"<redacted>")
                .finish(),
        }
    }
}

/// The parts of `azure.json` actuator-svc uses, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct AzureConfig {
    pub tenant_id: String,
    pub subscription_id: String,
    pub resource_group: String,
    pub location: String,
    /// Resource group of the load balancers (defaults to `resourceGroup`).
    pub load_balancer_resource_group: String,
    pub vnet_name: String,
    pub vnet_resource_group: String,
    pub subnet_name: String,
    /// `loadBalancerName` when set (otherwise LBs are named after the cluster).
    pub load_balancer_name: Option<String>,
    pub pool_type: PoolConfigType,
    /// Names of the multiple-standard-LB configurations (empty: single SLB).
    pub multi_slb: Vec<String>,
    /// The effective client-side limit for LB and pool calls, if enabled.
    pub rate_limit: Option<RateLimit>,
    pub credential: CredentialChoice,
}

/// Environment variables that override `azure.json` fields, as cloud-provider-azure honours
/// them (the workload-identity webhook injects them).
#[derive(Debug, Clone, Default)]
pub struct EnvOverrides {
    pub tenant_id: Option<String>,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    pub federated_token_file: Option<String>,
}

impl EnvOverrides {
    /// Reads `AZURE_TENANT_ID`, `AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET`,
    /// `AZURE_FEDERATED_TOKEN_FILE` (empty values count as unset).
    pub fn from_process() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Self {
            tenant_id: var("AZURE_TENANT_ID"),
            client_id: var("AZURE_CLIENT_ID"),
            client_secret: var("AZURE_CLIENT_SECRET"),
            federated_token_file: var("AZURE_FEDERATED_TOKEN_FILE"),
        }
    }
}

struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    fn string(&self, key: &str) -> Result<Option<String>, AzureJsonError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.trim().to_string())),
            Some(other) => Err(bad(key, format!("must be a string, got {other}"))),
        }
    }

    fn bool(&self, key: &str) -> Result<bool, AzureJsonError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(bad(key, format!("must be true or false, got {other}"))),
        }
    }

    fn number(&self, key: &str) -> Result<Option<f64>, AzureJsonError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n
                .as_f64()
                .map(Some)
                .ok_or_else(|| bad(key, "must be a number")),
            Some(other) => Err(bad(key, format!("must be a number, got {other}"))),
        }
    }
}

fn rate_limit_of(
    obj: &Map<String, Value>,
    prefix: &str,
) -> Result<Option<RateLimit>, AzureJsonError> {
    let f = Fields(obj);
    // The docs show both spellings of the switch.
    let enabled = f.bool("cloudProviderRateLimit")? || f.bool("cloudProviderRatelimit")?;
    if !enabled {
        return Ok(None);
    }
    let name = |k: &str| format!("{prefix}{k}");
    let positive = |key: &str, v: Option<f64>| -> Result<Option<f64>, AzureJsonError> {
        match v {
            Some(v) if v <= 0.0 || !v.is_finite() => Err(bad(&name(key), "must be greater than 0")),
            other => Ok(other),
        }
    };
    // Historical cloud-provider-azure defaults: QPS 1, bucket 5, writes = reads if unset.
    let read_qps = positive(
        "cloudProviderRateLimitQPS",
        f.number("cloudProviderRateLimitQPS")?,
    )?
    .unwrap_or(1.0);
    let read_bucket = positive(
        "cloudProviderRateLimitBucket",
        f.number("cloudProviderRateLimitBucket")?,
    )?
    .unwrap_or(5.0);
    let write_qps = positive(
        "cloudProviderRateLimitQPSWrite",
        f.number("cloudProviderRateLimitQPSWrite")?,
    )?
    .unwrap_or(read_qps);
    let write_bucket = positive(
        "cloudProviderRateLimitBucketWrite",
        f.number("cloudProviderRateLimitBucketWrite")?,
    )?
    .unwrap_or(read_bucket);
    Ok(Some(RateLimit {
        read_qps,
        read_bucket: read_bucket.ceil() as u32,
        write_qps,
        write_bucket: write_bucket.ceil() as u32,
    }))
}

fn pool_type(f: &Fields<'_>) -> Result<PoolConfigType, AzureJsonError> {
    const KEY: &str = "loadBalancerBackendPoolConfigurationType";
    match f.string(KEY)?.map(|s| s.to_ascii_lowercase()).as_deref() {
        None | Some("nodeipconfiguration") => Ok(PoolConfigType::NodeIpConfiguration),
        Some("nodeip") => Ok(PoolConfigType::NodeIp),
        Some("podip") => Err(bad(
            KEY,
            "podIP pools hold pod addresses, not nodes; admin state per node is not supported",
        )),
        Some(other) => Err(bad(
            KEY,
            format!("unknown value {other:?}; expected nodeIPConfiguration or nodeIP"),
        )),
    }
}

fn multi_slb(
    obj: &Map<String, Value>,
    cluster_name: &str,
    pool_type: PoolConfigType,
) -> Result<Vec<String>, AzureJsonError> {
    const KEY: &str = "multipleStandardLoadBalancerConfigurations";
    let list = match obj.get(KEY) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(bad(KEY, "must be a list")),
    };
    if list.is_empty() {
        return Ok(Vec::new());
    }
    if pool_type != PoolConfigType::NodeIp {
        return Err(bad(
            KEY,
            "needs loadBalancerBackendPoolConfigurationType nodeIP (as cloud-provider-azure requires)",
        ));
    }
    let mut names: Vec<String> = Vec::new();
    let mut primaries: Vec<String> = Vec::new();
    for (i, item) in list.iter().enumerate() {
        let Value::Object(entry) = item else {
            return Err(bad(&format!("{KEY}[{i}]"), "must be an object"));
        };
        let f = Fields(entry);
        let Some(name) = f.string("name")? else {
            return Err(bad(&format!("{KEY}[{i}].name"), "required"));
        };
        if names.iter().any(|n| n.eq_ignore_ascii_case(&name)) {
            return Err(bad(
                &format!("{KEY}[{i}].name"),
                format!("duplicate name {name:?}"),
            ));
        }
        if let Some(primary) = f.string("primaryVMSet")? {
            if primaries.iter().any(|p| p.eq_ignore_ascii_case(&primary)) {
                return Err(bad(
                    &format!("{KEY}[{i}].primaryVMSet"),
                    format!("{primary:?} is the primary VM set of another entry"),
                ));
            }
            primaries.push(primary);
        }
        names.push(name);
    }
    if !names.iter().any(|n| n.eq_ignore_ascii_case(cluster_name)) {
        return Err(bad(
            KEY,
            format!("one entry must be named after the cluster ({cluster_name:?})"),
        ));
    }
    Ok(names)
}

fn credential(f: &Fields<'_>, env: &EnvOverrides) -> Result<CredentialChoice, AzureJsonError> {
    let client_id = env.client_id.clone().or(f.string("aadClientId")?);
    let secret = env.client_secret.clone().or(f.string("aadClientSecret")?);
    let token_file = env
        .federated_token_file
        .clone()
        .or(f.string("aadFederatedTokenFile")?);
    // AZURE_FEDERATED_TOKEN_FILE forces workload identity on, as in cloud-provider-azure.
    let federated =
        f.bool("useFederatedWorkloadIdentityExtension")? || env.federated_token_file.is_some();
    if federated {
        let Some(token_file) = token_file else {
            return Err(bad(
                "aadFederatedTokenFile",
                "required with useFederatedWorkloadIdentityExtension",
            ));
        };
        let Some(client_id) = client_id else {
            return Err(bad(
                "aadClientId",
                "required for workload identity (or AZURE_CLIENT_ID)",
            ));
        };
        return Ok(CredentialChoice::WorkloadIdentity {
            client_id,
            token_file,
        });
    }
    if f.bool("useManagedIdentityExtension")? {
        return Ok(CredentialChoice::ManagedIdentity {
            user_assigned_id: f.string("userAssignedIdentityID")?,
        });
    }
    if let Some(user) = f.string("userAssignedIdentityID")? {
        return Err(bad(
            "userAssignedIdentityID",
            format!("{user:?} is set but useManagedIdentityExtension is false"),
        ));
    }
    match (client_id, secret) {
        (Some(client_id), Some(secret)) => Ok(CredentialChoice::ClientSecret { client_id, secret }),
        (Some(_), None) if f.string("aadClientCertPath")?.is_some() => Err(bad(
            "aadClientCertPath",
            "client certificate credentials are not supported; use a secret, managed identity or workload identity",
        )),
        (Some(_), None) => Err(bad("aadClientSecret", "required with aadClientId")),
        (None, Some(_)) => Err(bad("aadClientId", "required with aadClientSecret")),
        (None, None) => Err(bad(
            "aadClientId",
            "no credential configured: set useFederatedWorkloadIdentityExtension, useManagedIdentityExtension or aadClientId/aadClientSecret",
        )),
    }
}

/// Parses and validates `azure.json` text for the cluster `cluster_name`.
pub fn parse(
    text: &str,
    cluster_name: &str,
    env: &EnvOverrides,
) -> Result<AzureConfig, AzureJsonError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| AzureJsonError::NotJson(e.to_string()))?;
    let Value::Object(obj) = value else {
        return Err(AzureJsonError::NotJson("top level is not an object".into()));
    };
    let f = Fields(&obj);
    let tenant_id = env
        .tenant_id
        .clone()
        .or(f.string("tenantId")?)
        .ok_or_else(|| bad("tenantId", "required (or AZURE_TENANT_ID)"))?;
    let subscription_id = f
        .string("subscriptionId")?
        .ok_or_else(|| bad("subscriptionId", "required"))?;
    let resource_group = f
        .string("resourceGroup")?
        .ok_or_else(|| bad("resourceGroup", "required"))?;
    if let Some(sku) = f.string("loadBalancerSku")?
        && !sku.eq_ignore_ascii_case("standard")
    {
        return Err(bad(
            "loadBalancerSku",
            format!("{sku:?}: backend admin state exists only on Standard load balancers"),
        ));
    }
    let pool_type = pool_type(&f)?;
    let multi_slb = multi_slb(&obj, cluster_name, pool_type)?;
    let mut rate_limit = rate_limit_of(&obj, "")?;
    // The per-client stanza used by the LB and backend-pool clients overrides the global one.
    match obj.get("loadBalancerRateLimit") {
        None | Some(Value::Null) => {}
        Some(Value::Object(per_client)) => {
            if let Some(limit) = rate_limit_of(per_client, "loadBalancerRateLimit.")? {
                rate_limit = Some(limit);
            }
        }
        Some(_) => return Err(bad("loadBalancerRateLimit", "must be an object")),
    }
    Ok(AzureConfig {
        load_balancer_resource_group: f
            .string("loadBalancerResourceGroup")?
            .unwrap_or_else(|| resource_group.clone()),
        vnet_resource_group: f
            .string("vnetResourceGroup")?
            .unwrap_or_else(|| resource_group.clone()),
        vnet_name: f.string("vnetName")?.unwrap_or_default(),
        subnet_name: f.string("subnetName")?.unwrap_or_default(),
        location: f.string("location")?.unwrap_or_default(),
        load_balancer_name: f.string("loadBalancerName")?,
        credential: credential(&f, env)?,
        tenant_id,
        subscription_id,
        resource_group,
        pool_type,
        multi_slb,
        rate_limit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({
            "cloud": "AzurePublicCloud",
            "tenantId": "t", "subscriptionId": "s", "resourceGroup": "MC_rg",
            "aadClientId": "id", "aadClientSecret": "shh",
            "someFieldWeDoNotKnow": {"deep": [1, 2]},
        })
    }

    fn parse_v(v: &Value, env: &EnvOverrides) -> Result<AzureConfig, AzureJsonError> {
        parse(&v.to_string(), "kubernetes", env)
    }

    fn field_of(e: AzureJsonError) -> String {
        match e {
            AzureJsonError::Field { field, .. } => field,
            other => panic!("not a field error: {other}"),
        }
    }

    #[test]
    fn fixture_file_parses_with_defaults() {
        let cluster = aks_fixture::preset("aks-multi-slb").unwrap();
        let cfg = parse(
            &cluster.azure_json().to_string(),
            "kubernetes",
            &EnvOverrides::default(),
        )
        .unwrap();
        assert_eq!(cfg.pool_type, PoolConfigType::NodeIp);
        assert_eq!(cfg.multi_slb, vec!["kubernetes", "kubernetes-2"]);
        // vnetResourceGroup is "" in AKS files: it defaults to resourceGroup.
        assert_eq!(cfg.vnet_resource_group, cluster.resource_group);
        assert_eq!(cfg.load_balancer_resource_group, cluster.resource_group);
        let rl = cfg.rate_limit.unwrap();
        assert_eq!(
            (rl.read_qps, rl.read_bucket, rl.write_bucket),
            (10.0, 100, 100)
        );
        assert!(matches!(
            cfg.credential,
            CredentialChoice::ClientSecret { .. }
        ));
    }

    #[test]
    fn unknown_fields_are_tolerated_and_missing_required_named() {
        assert!(parse_v(&base(), &EnvOverrides::default()).is_ok());
        for key in ["subscriptionId", "resourceGroup", "tenantId"] {
            let mut v = base();
            v.as_object_mut().unwrap().remove(key);
            let e = parse_v(&v, &EnvOverrides::default()).unwrap_err();
            assert_eq!(field_of(e), key);
        }
    }

    #[test]
    fn wrong_types_and_inconsistent_values_name_the_field() {
        let cases: Vec<(Value, &str)> = vec![
            (json!({"subscriptionId": 5}), "subscriptionId"),
            (
                json!({"loadBalancerBackendPoolConfigurationType": "podIP"}),
                "loadBalancerBackendPoolConfigurationType",
            ),
            (
                json!({"loadBalancerBackendPoolConfigurationType": "weird"}),
                "loadBalancerBackendPoolConfigurationType",
            ),
            (json!({"loadBalancerSku": "basic"}), "loadBalancerSku"),
            (
                json!({"multipleStandardLoadBalancerConfigurations": [{"name": "kubernetes"}]}),
                "multipleStandardLoadBalancerConfigurations",
            ),
            (
                json!({"loadBalancerBackendPoolConfigurationType": "nodeIP",
                    "multipleStandardLoadBalancerConfigurations": [{"name": "other"}]}),
                "multipleStandardLoadBalancerConfigurations",
            ),
            (
                json!({"loadBalancerBackendPoolConfigurationType": "nodeIP",
                    "multipleStandardLoadBalancerConfigurations": [{"name": "kubernetes"}, {"name": "Kubernetes"}]}),
                "multipleStandardLoadBalancerConfigurations[1].name",
            ),
            (
                json!({"cloudProviderRateLimit": true, "cloudProviderRateLimitQPS": 0}),
                "cloudProviderRateLimitQPS",
            ),
            (
                json!({"loadBalancerRateLimit": {"cloudProviderRateLimit": true, "cloudProviderRateLimitBucketWrite": -1}}),
                "loadBalancerRateLimit.cloudProviderRateLimitBucketWrite",
            ),
            (
                json!({"useFederatedWorkloadIdentityExtension": true}),
                "aadFederatedTokenFile",
            ),
            (json!({"aadClientSecret": null}), "aadClientSecret"),
            (
                json!({"userAssignedIdentityID": "abc"}),
                "userAssignedIdentityID",
            ),
            (
                json!({"cloudProviderRateLimit": "yes"}),
                "cloudProviderRateLimit",
            ),
        ];
        for (patch, field) in cases {
            let mut v = base();
            for (k, val) in patch.as_object().unwrap() {
                v[k] = val.clone();
            }
            let e = parse_v(&v, &EnvOverrides::default()).unwrap_err();
            assert_eq!(field_of(e), field, "{patch}");
        }
        assert!(matches!(
            parse("[1]", "k", &EnvOverrides::default()),
            Err(AzureJsonError::NotJson(_))
        ));
    }

    #[test]
    fn per_client_rate_limit_overrides_and_writes_default_to_reads() {
        let mut v = base();
        v["cloudProviderRateLimit"] = json!(true);
        v["cloudProviderRateLimitQPS"] = json!(3);
        v["loadBalancerRateLimit"] = json!({"cloudProviderRateLimit": true, "cloudProviderRateLimitQPS": 2, "cloudProviderRateLimitBucket": 7});
        let rl = parse_v(&v, &EnvOverrides::default())
            .unwrap()
            .rate_limit
            .unwrap();
        assert_eq!(
            rl,
            RateLimit {
                read_qps: 2.0,
                read_bucket: 7,
                write_qps: 2.0,
                write_bucket: 7
            }
        );
    }

    #[test]
    fn credential_precedence_follows_cloud_provider_azure() {
        let mut v = base();
        v["useManagedIdentityExtension"] = json!(true);
        v["userAssignedIdentityID"] = json!("uami");
        let cfg = parse_v(&v, &EnvOverrides::default()).unwrap();
        assert_eq!(
            cfg.credential,
            CredentialChoice::ManagedIdentity {
                user_assigned_id: Some("uami".into())
            }
        );
        // The federated token file in the environment wins over everything.
        let env = EnvOverrides {
            tenant_id: Some("env-tenant".into()),
            client_id: Some("env-client".into()),
            client_secret: None,
            federated_token_file: Some("/var/run/token".into()),
        };
        let cfg = parse_v(&v, &env).unwrap();
        assert_eq!(cfg.tenant_id, "env-tenant");
        assert_eq!(
            cfg.credential,
            CredentialChoice::WorkloadIdentity {
                client_id: "env-client".into(),
                token_file: "/var/run/token".into()
            }
        );
    }

    #[test]
    fn secrets_are_redacted_in_debug() {
        let cfg = parse_v(&base(), &EnvOverrides::default()).unwrap();
        let text = format!("{cfg:?}");
        assert!(!text.contains("shh"), "{text}");
        assert!(text.contains("<redacted>"));
    }
}
