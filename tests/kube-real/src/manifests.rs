//! Applies manifests (multi-document YAML, as kubectl takes them) with server-side apply and
//! strict server-side field validation, so a wrong field is an error, not a silent drop.

use kube::api::{Api, DynamicObject, Patch, PatchParams, ValidationDirective};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};

/// Field manager of everything the harness applies.
pub const FIELD_MANAGER: &str = "cutover-tests";

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("document {index}: {reason}")]
    Invalid { index: usize, reason: String },
    #[error("{kind} {name}: {source}")]
    Api {
        kind: String,
        name: String,
        source: kube::Error,
    },
}

/// Splits multi-document YAML into objects, skipping empty documents and `List` wrappers'
/// shells (their items are returned).
pub fn parse(yaml: &str) -> Result<Vec<serde_json::Value>, ApplyError> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for (index, doc) in serde_yaml::Deserializer::from_str(yaml).enumerate() {
        let value = serde_json::Value::deserialize(doc).map_err(|e| ApplyError::Invalid {
            index,
            reason: e.to_string(),
        })?;
        match value {
            serde_json::Value::Null => {}
            serde_json::Value::Object(ref o)
                if o.get("kind").and_then(|k| k.as_str()) == Some("List") =>
            {
                if let Some(items) = o.get("items").and_then(|i| i.as_array()) {
                    out.extend(items.iter().cloned());
                }
            }
            v => out.push(v),
        }
    }
    Ok(out)
}

/// Applies every object; namespaced objects without a namespace go to `default_namespace`.
/// Returns `kind/name` of each object applied, in order.
pub async fn apply(
    client: &kube::Client,
    objects: &[serde_json::Value],
    default_namespace: &str,
) -> Result<Vec<String>, ApplyError> {
    let mut applied = Vec::new();
    for (index, o) in objects.iter().enumerate() {
        let obj: DynamicObject =
            serde_json::from_value(o.clone()).map_err(|e| ApplyError::Invalid {
                index,
                reason: e.to_string(),
            })?;
        let types = obj.types.clone().ok_or_else(|| ApplyError::Invalid {
            index,
            reason: "apiVersion and kind are required".into(),
        })?;
        let gvk = GroupVersionKind::try_from(&types).map_err(|e| ApplyError::Invalid {
            index,
            reason: e.to_string(),
        })?;
        let name = obj.metadata.name.clone().unwrap_or_default();
        let api_err = |source| ApplyError::Api {
            kind: types.kind.clone(),
            name: name.clone(),
            source,
        };
        let (resource, caps) = discovery::pinned_kind(client, &gvk)
            .await
            .map_err(api_err)?;
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Cluster => Api::all_with(client.clone(), &resource),
            Scope::Namespaced => {
                let ns = obj
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| default_namespace.to_owned());
                Api::namespaced_with(client.clone(), &ns, &resource)
            }
        };
        let mut params = PatchParams::apply(FIELD_MANAGER).force();
        params.field_validation = Some(ValidationDirective::Strict);
        api.patch(&name, &params, &Patch::Apply(o))
            .await
            .map_err(api_err)?;
        applied.push(format!("{}/{}", types.kind, name));
    }
    Ok(applied)
}
