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
//!
//! The scope is the `<resourceManagerEndpoint>/.default` form, accepted in all three clouds
//! (section 3 fact 3: the endpoint is the second audience of each cloud's metadata).
//! `AzureStackCloud` needs `AZURE_ENVIRONMENT_FILEPATH` (go-autorest's Environment JSON, as
//! cloud-provider-azure reads it); without it start-up fails naming `cloud`.
//!
//! Divergence from cloud-provider-azure, on purpose: a name it does not know (a typo,
//! `AzureGermanCloud`) falls back to the public cloud there; here it stops start-up naming the
//! field, since a token for the wrong cloud fails later and less clearly. azure.json's
//! `resourceManagerEndpoint` (metadata discovery) is not read: use the flags or the file.
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

/// Resolves the endpoints from azure.json's `cloud` (`None`: absent), the flags and `env`.
pub fn resolve(cloud: Option<&str>, flags: &Overrides, env: &Env) -> Result<Cloud, String> {
    let field = cloud.map(str::trim).filter(|s| !s.is_empty());
    let (name, arm, authority, scope) = match known(field.unwrap_or(""))? {
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

/// [`resolve`] with azure.json's text and the process environment.
pub fn from_process(azure_json: &str, flags: &Overrides) -> Result<Cloud, String> {
    let var = |k: &str| std::env::var(k).ok().filter(|s| !s.trim().is_empty());
    let env = Env {
        authority_host: var("AZURE_AUTHORITY_HOST"),
        environment_file: var("AZURE_ENVIRONMENT_FILEPATH").map(|p| {
            let text = std::fs::read_to_string(&p).map_err(|e| e.to_string());
            (p, text)
        }),
    };
    resolve(cloud_field(azure_json).as_deref(), flags, &env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> Overrides {
        Overrides::default()
    }

    fn r(cloud: Option<&str>) -> Cloud {
        resolve(cloud, &none(), &Env::default()).unwrap()
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
            let e = resolve(Some(bad), &none(), &Env::default()).unwrap_err();
            assert!(e.starts_with("cloud: unknown cloud"), "{e}");
        }
    }

    #[test]
    fn flags_override_each_value_alone() {
        let flags = Overrides {
            arm_endpoint: Some(Url::parse("https://127.0.0.1:8443").unwrap()),
            ..none()
        };
        let c = resolve(Some("AzureChinaCloud"), &flags, &Env::default()).unwrap();
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
        let c = resolve(Some("AzureChinaCloud"), &flags, &Env::default()).unwrap();
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
        assert!(resolve(None, &flags, &Env::default()).is_err());
    }

    #[test]
    fn authority_host_env_applies_only_without_a_cloud_field() {
        let env = Env {
            authority_host: Some("https://login.microsoftonline.us/".into()),
            environment_file: None,
        };
        let c = resolve(None, &none(), &env).unwrap();
        assert_eq!(c.authority.as_str(), "https://login.microsoftonline.us/");
        let c = resolve(Some("AzureChinaCloud"), &none(), &env).unwrap();
        assert_eq!(c.authority.as_str(), "https://login.chinacloudapi.cn/");
    }

    #[test]
    fn azure_stack_reads_its_environment_file_or_says_what_is_missing() {
        let e = resolve(Some("AzureStackCloud"), &none(), &Env::default()).unwrap_err();
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
        )
        .unwrap_err();
        assert!(adfs.contains("ADFS"), "{adfs}");
        assert!(
            resolve(Some("AzureStackCloud"), &none(), &file("{}"))
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
}
