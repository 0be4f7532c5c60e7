//! azure.json's `cloud`: which Azure cloud's ARM endpoint, Entra ID authority host and token
//! scope every call uses, as cloud-provider-azure maps it (azure-production.md section 3:
//! facts 1-3 for the names and the endpoint table, 2 for Azure Stack's environment file, the
//! "What this means" list for the precedence). Pure but for [`from_process`].
//!
//! | `cloud` (case-insensitive, trimmed) | ARM endpoint | authority host | token scope |
//! | --- | --- | --- | --- |
//! | empty, `AzurePublicCloud`, `AzureCloud` | `https://management.azure.com` | `https://login.microsoftonline.com` | `https://management.azure.com/.default` |
//! | `AzureChinaCloud` | `https://management.chinacloudapi.cn` | `https://login.chinacloudapi.cn` | `https://management.chinacloudapi.cn/.default` |
//! | `AzureUSGovernmentCloud`, `AzureUSGovernment` | `https://management.usgovcloudapi.net` | `https://login.microsoftonline.us` | `https://management.usgovcloudapi.net/.default` |
//! | `AzureStackCloud` | the environment file's `resourceManagerEndpoint` | its `activeDirectoryEndpoint` | its `tokenAudience` (else the endpoint) + `/.default` |
//! | any, with azure.json's `resourceManagerEndpoint` | the metadata's `resourceManager` (else that endpoint) | its `authentication.loginEndpoint` | its `authentication.audiences[0]` + `/.default` |
//!
//! The scope is the `<resourceManagerEndpoint>/.default` form, accepted in all three clouds
//! (section 3 fact 3: the endpoint is the second audience of each cloud's metadata).
//! `AzureStackCloud` needs `AZURE_ENVIRONMENT_FILEPATH` (go-autorest's Environment JSON, as
//! cloud-provider-azure reads it); without it start-up fails naming `cloud`.
//!
//! A custom cloud (Azure Stack Hub, a private ARM): azure.json's `resourceManagerEndpoint`, as
//! cloud-provider-azure reads it (section 3 fact 2, `AzureCloudConfigFromURL`): at start the
//! service GETs `<resourceManagerEndpoint>/metadata/endpoints?api-version=2019-05-01`
//! ([`metadata_url`], fetched by `bootstrap`) and [`parse_metadata`] takes from the document the
//! ARM endpoint (`resourceManager`, else the configured endpoint, as on Azure Stack Hub), the
//! authority (`authentication.loginEndpoint`) and the audience (`authentication.audiences[0]`,
//! scope `<audience>/.default`). The document is a list of clouds (2019-05-01: the entry named
//! as `cloud` is taken, else the first) or one cloud (2022-09-01's shape): both are read. With
//! `resourceManagerEndpoint` the metadata defines the cloud whatever `cloud` says (any name is
//! then accepted, as a label) and the environment file is not read, as in cloud-provider-azure.
//! The endpoint must be https (plain http only on loopback): its answer decides where the
//! bearer token goes.
//!
//! Divergence from cloud-provider-azure, on purpose: a name it does not know (a typo,
//! `AzureGermanCloud`) falls back to the public cloud there; here it stops start-up naming the
//! field, since a token for the wrong cloud fails later and less clearly. A metadata endpoint
//! that cannot be read stops start-up too (as there).
//!
//! Precedence, each value on its own: the flag (`--arm-endpoint`, `--aad-authority`,
//! `--arm-token-scope`), else the cloud; for the authority only, with no `cloud` field,
//! `AZURE_AUTHORITY_HOST` (the workload identity webhook sets it) before the public default.

use serde_json::Value;
use url::Url;

/// One of the clouds with fixed endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    pub name: &'static str,
    pub resource_manager: &'static str,
    pub authority_host: &'static str,
}

pub const PUBLIC: Known = Known {
    name: "AzurePublicCloud",
    resource_manager: "https://management.azure.com",
    authority_host: "https://login.microsoftonline.com",
};
pub const CHINA: Known = Known {
    name: "AzureChinaCloud",
    resource_manager: "https://management.chinacloudapi.cn",
    authority_host: "https://login.chinacloudapi.cn",
};
pub const US_GOVERNMENT: Known = Known {
    name: "AzureUSGovernmentCloud",
    resource_manager: "https://management.usgovcloudapi.net",
    authority_host: "https://login.microsoftonline.us",
};

/// The endpoints every Azure call uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cloud {
    /// `AzurePublicCloud`, ..., or `AzureStackCloud`.
    pub name: String,
    pub arm_endpoint: Url,
    pub authority: Url,
    /// The token scope for ARM (`<resourceManagerEndpoint>/.default`).
    pub token_scope: String,
}

/// The flags that override the cloud's values, one by one.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub arm_endpoint: Option<Url>,
    pub authority: Option<Url>,
    pub token_scope: Option<String>,
}

/// What the process environment contributes.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// `AZURE_AUTHORITY_HOST`.
    pub authority_host: Option<String>,
    /// `AZURE_ENVIRONMENT_FILEPATH` and the file's text (`Err`: why it could not be read).
    pub environment_file: Option<(String, Result<String, String>)>,
}

fn parse_url(what: &str, s: &str) -> Result<Url, String> {
    Url::parse(s.trim()).map_err(|e| format!("{what}: {s:?}: {e}"))
}

fn scope_of(audience: &str) -> String {
    format!("{}/.default", audience.trim().trim_end_matches('/'))
}

/// The cloud a name means; `Ok(None)` for `AzureStackCloud` (endpoints from a file).
pub fn known(name: &str) -> Result<Option<Known>, String> {
    match name.trim().to_ascii_uppercase().as_str() {
        "" | "AZURECLOUD" | "AZUREPUBLICCLOUD" => Ok(Some(PUBLIC)),
        "AZURECHINACLOUD" => Ok(Some(CHINA)),
        "AZUREUSGOVERNMENT" | "AZUREUSGOVERNMENTCLOUD" => Ok(Some(US_GOVERNMENT)),
        "AZURESTACKCLOUD" => Ok(None),
        _ => Err(format!(
            "cloud: unknown cloud {name:?}; one of AzurePublicCloud, AzureChinaCloud, AzureUSGovernmentCloud, AzureStackCloud (with AZURE_ENVIRONMENT_FILEPATH)"
        )),
    }
}

/// Azure Stack's environment file (go-autorest Environment: the fields used).
fn stack_endpoints(env: &Env) -> Result<(Url, Url, String), String> {
    let Some((path, text)) = &env.environment_file else {
        return Err(
            "cloud: AzureStackCloud needs AZURE_ENVIRONMENT_FILEPATH naming the environment JSON (resourceManagerEndpoint, activeDirectoryEndpoint, tokenAudience), or --arm-endpoint, --aad-authority and --arm-token-scope"
                .into(),
        );
    };
    let what = format!("AZURE_ENVIRONMENT_FILEPATH {path}");
    let text = text.as_ref().map_err(|e| format!("{what}: {e}"))?;
    let v: Value = serde_json::from_str(text).map_err(|e| format!("{what}: {e}"))?;
    let field = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    };
    let arm = field("resourceManagerEndpoint")
        .ok_or_else(|| format!("{what}: resourceManagerEndpoint missing"))?;
    let ad = field("activeDirectoryEndpoint")
        .ok_or_else(|| format!("{what}: activeDirectoryEndpoint missing"))?;
    let arm = parse_url(&format!("{what}: resourceManagerEndpoint"), arm)?;
    let authority = parse_url(&format!("{what}: activeDirectoryEndpoint"), ad)?;
    // azure_identity joins `/{tenant}/oauth2/v2.0/token` to the host: a path (ADFS, `/adfs`)
    // would be dropped (azure-production.md 3, "Unknown").
    if !authority.path().trim_matches('/').is_empty() {
        return Err(format!(
            "{what}: activeDirectoryEndpoint {authority} has a path (ADFS): not supported, only Entra ID authorities"
        ));
    }
    let scope = scope_of(field("tokenAudience").unwrap_or(arm.as_str()));
    Ok((arm, authority, scope))
}

/// The api-version of the metadata endpoint, cloud-provider-azure's (section 3 fact 2).
pub const METADATA_API_VERSION: &str = "2019-05-01";

/// The metadata document's URL for azure.json's `resourceManagerEndpoint`.
pub fn metadata_url(endpoint: &Url) -> Url {
    let mut url = endpoint.clone();
    let path = format!("{}/metadata/endpoints", url.path().trim_end_matches('/'));
    url.set_path(&path);
    url.set_query(Some(&format!("api-version={METADATA_API_VERSION}")));
    url
}

/// azure.json's `resourceManagerEndpoint` (absent or empty: `None`).
pub fn resource_manager_field(azure_json: &str) -> Result<Option<Url>, String> {
    let v: Value = serde_json::from_str(azure_json).map_err(|e| e.to_string())?;
    match v
        .get("resourceManagerEndpoint")
        .and_then(Value::as_str)
        .map(str::trim)
    {
        None | Some("") => Ok(None),
        Some(s) => parse_url("resourceManagerEndpoint", s).map(Some),
    }
}

/// A custom cloud's endpoints, from its ARM's metadata document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// The entry's `name` (empty when it has none).
    pub name: String,
    pub resource_manager: Url,
    pub authority: Url,
    pub audience: String,
}

#[derive(serde::Deserialize)]
struct MetadataEntry {
    #[serde(default)]
    name: String,
    #[serde(default, rename = "resourceManager")]
    resource_manager: String,
    authentication: Option<MetadataAuth>,
}

#[derive(serde::Deserialize)]
struct MetadataAuth {
    #[serde(default, rename = "loginEndpoint")]
    login_endpoint: String,
    #[serde(default)]
    audiences: Vec<String>,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum MetadataDoc {
    List(Vec<MetadataEntry>),
    One(MetadataEntry),
}

/// Reads the metadata document `text` fetched from `endpoint` (azure.json's
/// `resourceManagerEndpoint`); `cloud` is azure.json's `cloud`, which picks the entry of a list.
pub fn parse_metadata(text: &str, cloud: Option<&str>, endpoint: &Url) -> Result<Metadata, String> {
    let what = format!("metadata of resourceManagerEndpoint {endpoint}");
    let doc: MetadataDoc = serde_json::from_str(text.trim_start_matches('\u{feff}'))
        .map_err(|e| format!("{what}: not a metadata document: {e}"))?;
    let entry = match doc {
        MetadataDoc::One(e) => e,
        MetadataDoc::List(list) => {
            let wanted = cloud.map(str::trim).filter(|s| !s.is_empty());
            let at = wanted
                .and_then(|w| list.iter().position(|e| e.name.eq_ignore_ascii_case(w)))
                .unwrap_or(0);
            list.into_iter()
                .nth(at)
                .ok_or_else(|| format!("{what}: no cloud in the document"))?
        }
    };
    let auth = entry
        .authentication
        .ok_or_else(|| format!("{what}: authentication missing"))?;
    if auth.login_endpoint.trim().is_empty() {
        return Err(format!("{what}: authentication.loginEndpoint missing"));
    }
    let authority = parse_url(
        &format!("{what}: authentication.loginEndpoint"),
        &auth.login_endpoint,
    )?;
    if !authority.path().trim_matches('/').is_empty() {
        return Err(format!(
            "{what}: loginEndpoint {authority} has a path (ADFS): not supported, only Entra ID authorities"
        ));
    }
    // Azure Stack Hub's entries name no resourceManager: the configured endpoint is it.
    let resource_manager = match entry.resource_manager.trim() {
        "" => endpoint.clone(),
        s => parse_url(&format!("{what}: resourceManager"), s)?,
    };
    let audience = auth
        .audiences
        .iter()
        .map(|a| a.trim())
        .find(|a| !a.is_empty())
        .map_or_else(|| resource_manager.to_string(), str::to_owned);
    Ok(Metadata {
        name: entry.name.trim().to_owned(),
        resource_manager,
        authority,
        audience,
    })
}

/// The endpoints `cloud` names (name, ARM endpoint, authority, scope).
fn by_name(
    field: Option<&str>,
    flags: &Overrides,
    env: &Env,
) -> Result<(String, Url, Url, String), String> {
    Ok(match known(field.unwrap_or(""))? {
        Some(k) => (
            k.name.to_string(),
            parse_url("cloud", k.resource_manager)?,
            // No `cloud` field: the webhook's AZURE_AUTHORITY_HOST, as azidentity does.
            match (field, env.authority_host.as_deref().map(str::trim)) {
                (None, Some(h)) if !h.is_empty() => parse_url("AZURE_AUTHORITY_HOST", h)?,
                _ => parse_url("cloud", k.authority_host)?,
            },
            scope_of(k.resource_manager),
        ),
        None => match (&flags.arm_endpoint, &flags.authority, &flags.token_scope) {
            // Every value given by a flag: no file needed.
            (Some(arm), Some(authority), Some(scope)) => (
                "AzureStackCloud".to_string(),
                arm.clone(),
                authority.clone(),
                scope.clone(),
            ),
            _ => {
                let (arm, authority, scope) = stack_endpoints(env)?;
                ("AzureStackCloud".to_string(), arm, authority, scope)
            }
        },
    })
}

/// Resolves the endpoints from azure.json's `cloud` (`None`: absent), the flags, `env`, and the
/// metadata document of azure.json's `resourceManagerEndpoint` when it names one.
pub fn resolve(
    cloud: Option<&str>,
    flags: &Overrides,
    env: &Env,
    metadata: Option<&Metadata>,
) -> Result<Cloud, String> {
    let field = cloud.map(str::trim).filter(|s| !s.is_empty());
    let (name, arm, authority, scope) = match metadata {
        // The metadata defines the cloud; `cloud` is only a label then.
        Some(m) => (
            match (m.name.as_str(), field) {
                ("", Some(f)) => f.to_owned(),
                ("", None) => "custom".to_owned(),
                (n, _) => n.to_owned(),
            },
            m.resource_manager.clone(),
            m.authority.clone(),
            scope_of(&m.audience),
        ),
        None => by_name(field, flags, env)?,
    };
    let token_scope = match &flags.token_scope {
        Some(s) if !s.trim().ends_with("/.default") => {
            return Err(format!(
                "--arm-token-scope {s:?}: must end with /.default (e.g. https://management.azure.com/.default)"
            ));
        }
        Some(s) => s.trim().to_string(),
        None => scope,
    };
    Ok(Cloud {
        name,
        arm_endpoint: flags.arm_endpoint.clone().unwrap_or(arm),
        authority: flags.authority.clone().unwrap_or(authority),
        token_scope,
    })
}

/// The `cloud` field of azure.json's text (absent or not a string: `None`).
pub fn cloud_field(azure_json: &str) -> Option<String> {
    let v: Value = serde_json::from_str(azure_json).ok()?;
    v.get("cloud").and_then(Value::as_str).map(str::to_owned)
}

/// [`resolve`] with azure.json's text, the process environment and the metadata document.
pub fn from_process(
    azure_json: &str,
    flags: &Overrides,
    metadata: Option<&Metadata>,
) -> Result<Cloud, String> {
    let var = |k: &str| std::env::var(k).ok().filter(|s| !s.trim().is_empty());
    let env = Env {
        authority_host: var("AZURE_AUTHORITY_HOST"),
        environment_file: var("AZURE_ENVIRONMENT_FILEPATH").map(|p| {
            let text = std::fs::read_to_string(&p).map_err(|e| e.to_string());
            (p, text)
        }),
    };
    resolve(cloud_field(azure_json).as_deref(), flags, &env, metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> Overrides {
        Overrides::default()
    }

    fn r(cloud: Option<&str>) -> Cloud {
        resolve(cloud, &none(), &Env::default(), None).unwrap()
    }

    #[test]
    fn each_cloud_selects_its_endpoint_authority_and_scope() {
        for (name, arm, login, scope) in [
            (
                Some("AzurePublicCloud"),
                "https://management.azure.com/",
                "https://login.microsoftonline.com/",
                "https://management.azure.com/.default",
            ),
            (
                None,
                "https://management.azure.com/",
                "https://login.microsoftonline.com/",
                "https://management.azure.com/.default",
            ),
            (
                Some(" azurecloud "),
                "https://management.azure.com/",
                "https://login.microsoftonline.com/",
                "https://management.azure.com/.default",
            ),
            (
                Some("AzureChinaCloud"),
                "https://management.chinacloudapi.cn/",
                "https://login.chinacloudapi.cn/",
                "https://management.chinacloudapi.cn/.default",
            ),
            (
                Some("AzureUSGovernmentCloud"),
                "https://management.usgovcloudapi.net/",
                "https://login.microsoftonline.us/",
                "https://management.usgovcloudapi.net/.default",
            ),
            (
                Some("AZUREUSGOVERNMENT"),
                "https://management.usgovcloudapi.net/",
                "https://login.microsoftonline.us/",
                "https://management.usgovcloudapi.net/.default",
            ),
        ] {
            let c = r(name);
            assert_eq!(c.arm_endpoint.as_str(), arm, "{name:?}");
            assert_eq!(c.authority.as_str(), login, "{name:?}");
            assert_eq!(c.token_scope, scope, "{name:?}");
        }
    }

    #[test]
    fn an_unknown_cloud_is_an_error_naming_the_field() {
        for bad in ["AzureGermanCloud", "AzurePublic", "china"] {
            let e = resolve(Some(bad), &none(), &Env::default(), None).unwrap_err();
            assert!(e.starts_with("cloud: unknown cloud"), "{e}");
        }
    }

    #[test]
    fn flags_override_each_value_alone() {
        let flags = Overrides {
            arm_endpoint: Some(Url::parse("https://127.0.0.1:8443").unwrap()),
            ..none()
        };
        let c = resolve(Some("AzureChinaCloud"), &flags, &Env::default(), None).unwrap();
        assert_eq!(c.arm_endpoint.as_str(), "https://127.0.0.1:8443/");
        assert_eq!(c.authority.as_str(), "https://login.chinacloudapi.cn/");
        assert_eq!(
            c.token_scope,
            "https://management.chinacloudapi.cn/.default"
        );
        let flags = Overrides {
            authority: Some(Url::parse("https://login.example").unwrap()),
            token_scope: Some("https://management.core.chinacloudapi.cn/.default".into()),
            ..none()
        };
        let c = resolve(Some("AzureChinaCloud"), &flags, &Env::default(), None).unwrap();
        assert_eq!(
            c.arm_endpoint.as_str(),
            "https://management.chinacloudapi.cn/"
        );
        assert_eq!(c.authority.as_str(), "https://login.example/");
        assert_eq!(
            c.token_scope,
            "https://management.core.chinacloudapi.cn/.default"
        );
        let flags = Overrides {
            token_scope: Some("https://management.azure.com".into()),
            ..none()
        };
        assert!(resolve(None, &flags, &Env::default(), None).is_err());
    }

    #[test]
    fn authority_host_env_applies_only_without_a_cloud_field() {
        let env = Env {
            authority_host: Some("https://login.microsoftonline.us/".into()),
            environment_file: None,
        };
        let c = resolve(None, &none(), &env, None).unwrap();
        assert_eq!(c.authority.as_str(), "https://login.microsoftonline.us/");
        let c = resolve(Some("AzureChinaCloud"), &none(), &env, None).unwrap();
        assert_eq!(c.authority.as_str(), "https://login.chinacloudapi.cn/");
    }

    #[test]
    fn azure_stack_reads_its_environment_file_or_says_what_is_missing() {
        let e = resolve(Some("AzureStackCloud"), &none(), &Env::default(), None).unwrap_err();
        assert!(
            e.starts_with("cloud: AzureStackCloud needs AZURE_ENVIRONMENT_FILEPATH"),
            "{e}"
        );
        let file = |text: &str| Env {
            authority_host: None,
            environment_file: Some(("/etc/azs.json".into(), Ok(text.into()))),
        };
        let c = resolve(
            Some("AzureStackCloud"),
            &none(),
            &file(r#"{"name":"AzureStackCloud","resourceManagerEndpoint":"https://management.local.azurestack.external/","activeDirectoryEndpoint":"https://login.microsoftonline.com/","tokenAudience":"https://management.contoso.onmicrosoft.com/abc"}"#),
            None,
        )
        .unwrap();
        assert_eq!(
            c.arm_endpoint.as_str(),
            "https://management.local.azurestack.external/"
        );
        assert_eq!(
            c.token_scope,
            "https://management.contoso.onmicrosoft.com/abc/.default"
        );
        let adfs = resolve(
            Some("AzureStackCloud"),
            &none(),
            &file(r#"{"resourceManagerEndpoint":"https://m.local/","activeDirectoryEndpoint":"https://adfs.local/adfs/"}"#),
            None,
        )
        .unwrap_err();
        assert!(adfs.contains("ADFS"), "{adfs}");
        assert!(
            resolve(Some("AzureStackCloud"), &none(), &file("{}"), None)
                .unwrap_err()
                .contains("resourceManagerEndpoint missing")
        );
    }

    #[test]
    fn the_field_is_read_from_azure_json() {
        assert_eq!(
            cloud_field(r#"{"cloud":"AzureChinaCloud","tenantId":"t"}"#).as_deref(),
            Some("AzureChinaCloud")
        );
        assert_eq!(cloud_field(r#"{"tenantId":"t"}"#), None);
    }

    fn endpoint() -> Url {
        Url::parse("https://management.stack.example:8443/").unwrap()
    }

    #[test]
    fn the_metadata_url_is_cloud_provider_azures() {
        assert_eq!(
            metadata_url(&endpoint()).as_str(),
            "https://management.stack.example:8443/metadata/endpoints?api-version=2019-05-01"
        );
        assert_eq!(
            metadata_url(&Url::parse("https://m.example/arm/").unwrap()).as_str(),
            "https://m.example/arm/metadata/endpoints?api-version=2019-05-01"
        );
        assert_eq!(
            resource_manager_field(r#"{"resourceManagerEndpoint":" https://m.example/ "}"#)
                .unwrap()
                .unwrap()
                .as_str(),
            "https://m.example/"
        );
        assert_eq!(resource_manager_field(r#"{"cloud":"x"}"#).unwrap(), None);
        assert_eq!(
            resource_manager_field(r#"{"resourceManagerEndpoint":""}"#).unwrap(),
            None
        );
        assert!(resource_manager_field(r#"{"resourceManagerEndpoint":"not a url"}"#).is_err());
    }

    #[test]
    fn a_metadata_list_gives_the_named_entry_or_the_first() {
        let doc = r#"[
            {"name":"AzureCloud","resourceManager":"https://management.azure.com/",
             "authentication":{"loginEndpoint":"https://login.microsoftonline.com/","audiences":["https://management.core.windows.net/","https://management.azure.com/"]}},
            {"name":"AzureChinaCloud","resourceManager":"https://management.chinacloudapi.cn",
             "authentication":{"loginEndpoint":"https://login.chinacloudapi.cn/","audiences":["https://management.core.chinacloudapi.cn","https://management.chinacloudapi.cn"]}}
        ]"#;
        let m = parse_metadata(doc, Some("azurechinacloud"), &endpoint()).unwrap();
        assert_eq!(m.name, "AzureChinaCloud");
        assert_eq!(
            m.resource_manager.as_str(),
            "https://management.chinacloudapi.cn/"
        );
        assert_eq!(m.authority.as_str(), "https://login.chinacloudapi.cn/");
        assert_eq!(m.audience, "https://management.core.chinacloudapi.cn");
        for other in [None, Some("AzureStackCloud")] {
            let m = parse_metadata(doc, other, &endpoint()).unwrap();
            assert_eq!(m.name, "AzureCloud", "{other:?}");
        }
        let m = parse_metadata(doc, Some("AzureStackCloud"), &endpoint()).unwrap();
        let c = resolve(Some("AzureStackCloud"), &none(), &Env::default(), Some(&m)).unwrap();
        assert_eq!(c.name, "AzureCloud");
        assert_eq!(c.arm_endpoint.as_str(), "https://management.azure.com/");
        assert_eq!(c.authority.as_str(), "https://login.microsoftonline.com/");
        // CPA's scope: the first audience, its trailing slash trimmed, + /.default.
        assert_eq!(
            c.token_scope,
            "https://management.core.windows.net/.default"
        );
    }

    #[test]
    fn one_cloud_documents_and_azure_stack_entries_without_an_endpoint_are_read() {
        // 2022-09-01's shape: one object. Azure Stack Hub names no resourceManager.
        let doc = "\u{feff}{\"name\":\"AzureStack-User-1\",\"authentication\":{\"loginEndpoint\":\"https://login.microsoftonline.com/\",\"audiences\":[\"https://management.contoso.onmicrosoft.com/7c0e\"]}}";
        let m = parse_metadata(doc, None, &endpoint()).unwrap();
        assert_eq!(m.resource_manager, endpoint());
        let c = resolve(None, &none(), &Env::default(), Some(&m)).unwrap();
        assert_eq!(c.name, "AzureStack-User-1");
        assert_eq!(
            c.token_scope,
            "https://management.contoso.onmicrosoft.com/7c0e/.default"
        );
        // A name cloud-provider-azure does not know is only a label with a metadata endpoint;
        // the flags still override each value.
        let flags = Overrides {
            authority: Some(Url::parse("https://login.example").unwrap()),
            ..none()
        };
        let c = resolve(Some("MyCloud"), &flags, &Env::default(), Some(&m)).unwrap();
        assert_eq!(c.authority.as_str(), "https://login.example/");
        assert_eq!(c.arm_endpoint, endpoint());
        // No audience: the endpoint is the audience.
        let bare = r#"{"authentication":{"loginEndpoint":"https://login.example/"}}"#;
        let m = parse_metadata(bare, None, &endpoint()).unwrap();
        assert_eq!(m.audience, endpoint().as_str());
    }

    #[test]
    fn unusable_metadata_says_why() {
        for (doc, says) in [
            ("<html>proxy error</html>", "not a metadata document"),
            ("[]", "no cloud in the document"),
            (r#"{"name":"x"}"#, "authentication missing"),
            (
                r#"{"authentication":{"audiences":["a"]}}"#,
                "loginEndpoint missing",
            ),
            (
                r#"{"authentication":{"loginEndpoint":"https://adfs.local/adfs/"}}"#,
                "ADFS",
            ),
        ] {
            let e = parse_metadata(doc, None, &endpoint()).unwrap_err();
            assert!(
                e.starts_with(
                    "metadata of resourceManagerEndpoint https://management.stack.example:8443/"
                ),
                "{e}"
            );
            assert!(e.contains(says), "{doc}: {e}");
        }
    }
}
