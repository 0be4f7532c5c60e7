//! OpenAPI documents for the served kinds, as kube-apiserver publishes them:
//! - v3: `/openapi/v3` (an index of group-version paths, each with a `hash` query) and one
//!   document per group-version (`/openapi/v3/api/v1`, `/openapi/v3/apis/<group>/v1`);
//! - v2: `/openapi/v2`, one document for everything, JSON only (a client asking only for
//!   protobuf gets 406, which client-go treats as "not served in that form").
//!
//! The type schemas are not written here: they come from k8s-openapi's `JsonSchema` impls
//! (generated from the upstream OpenAPI definitions), rendered by schemars with OpenAPI 3
//! settings. This module adds what the server itself derives from its registry: the
//! `x-kubernetes-group-version-kind` extension on each kind (from k8s-openapi's `Resource`
//! constants), the `<Kind>List` wrappers, and the paths with their operations and query
//! parameters. kubectl needs the paths: it enables server-side field validation only if
//! the PATCH operation of the kind lists a `fieldValidation` parameter, and `kubectl explain`
//! finds a kind by its group-version-kind extension.
//!
//! Not included: `x-kubernetes-patch-strategy`/`-merge-key` (k8s-openapi's schemas do not
//! carry them), so kubectl's client-side strategic patches replace lists instead of merging
//! them by key; the server still merges by key when a patch asks it to.

use crate::discovery::GIT_VERSION;
use crate::resource::View;
use k8s_openapi::Resource;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, ServiceAccount};
use k8s_openapi::api::events::v1::Event as EventsV1;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ListMeta, Status};
use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::LazyLock;

/// One published group-version document.
#[derive(Debug)]
pub struct GroupVersionDoc {
    /// Opaque content hash, as in the index's `serverRelativeURL` (`?hash=`).
    pub hash: String,
    pub body: Vec<u8>,
}

/// Every OpenAPI document this server publishes (built once, on first use).
#[derive(Debug)]
pub struct Documents {
    /// `/openapi/v3` index.
    pub index: Vec<u8>,
    /// Keyed by `api/v1`, `apis/<group>/v1`.
    pub v3: BTreeMap<String, GroupVersionDoc>,
    /// `/openapi/v2`.
    pub v2: Vec<u8>,
}

pub static DOCUMENTS: LazyLock<Documents> = LazyLock::new(build);

/// Which OpenAPI flavour a document is rendered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavour {
    V2,
    V3,
}

impl Flavour {
    fn generator(self) -> SchemaGenerator {
        let path = match self {
            Flavour::V2 => "/definitions",
            Flavour::V3 => "/components/schemas",
        };
        SchemaSettings::openapi3()
            .with(|s| s.definitions_path = path.into())
            .into_generator()
    }

    fn reference(self, name: &str) -> Value {
        match self {
            Flavour::V2 => json!({"$ref": format!("#/definitions/{name}")}),
            Flavour::V3 => json!({"$ref": format!("#/components/schemas/{name}")}),
        }
    }
}

/// Registers `T` (and, through it, every type it refers to) and returns its schema name.
fn register<T: JsonSchema + Resource>(generator: &mut SchemaGenerator) -> (String, Value) {
    generator.subschema_for::<T>();
    let gvk = json!({"group": T::GROUP, "kind": T::KIND, "version": T::VERSION});
    (T::schema_name().into_owned(), gvk)
}

/// The schema name and GVK of a view's kind, registered in `generator`.
fn register_view(view: View, generator: &mut SchemaGenerator) -> (String, Value) {
    match view {
        View::Node => register::<Node>(generator),
        View::CoreEvent => register::<CoreEvent>(generator),
        View::EventsV1 => register::<EventsV1>(generator),
        View::Lease => register::<Lease>(generator),
        View::ServiceAccount => register::<ServiceAccount>(generator),
        View::ClusterRole => register::<ClusterRole>(generator),
        View::ClusterRoleBinding => register::<ClusterRoleBinding>(generator),
        View::Role => register::<Role>(generator),
        View::RoleBinding => register::<RoleBinding>(generator),
    }
}

/// `(path key, views)` of every group-version, in index order.
fn group_versions() -> Vec<(String, Vec<View>)> {
    let mut out: Vec<(String, Vec<View>)> = Vec::new();
    for view in View::ALL {
        let key = match view.group() {
            "" => "api/v1".to_string(),
            g => format!("apis/{g}/v1"),
        };
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, views)) => views.push(view),
            None => out.push((key, vec![view])),
        }
    }
    out
}

/// The definitions and paths for `views`, in one flavour.
fn render(views: &[View], flavour: Flavour) -> (Map<String, Value>, Map<String, Value>) {
    let mut generator = flavour.generator();
    generator.subschema_for::<Status>();
    generator.subschema_for::<DeleteOptions>();
    generator.subschema_for::<ListMeta>();
    let kinds: Vec<(View, String, Value)> = views
        .iter()
        .map(|v| {
            let (name, gvk) = register_view(*v, &mut generator);
            (*v, name, gvk)
        })
        .collect();
    let mut defs = generator.take_definitions(true);
    let mut paths = Map::new();
    for (view, name, gvk) in &kinds {
        if let Some(schema) = defs.get_mut(name).and_then(Value::as_object_mut) {
            schema.insert("x-kubernetes-group-version-kind".into(), json!([gvk]));
        }
        let list_name = format!("{name}List");
        let list_gvk = json!({"group": gvk["group"], "kind": view.list_kind(), "version": "v1"});
        defs.insert(
            list_name.clone(),
            list_schema(flavour, view, name, &list_gvk),
        );
        for (path, item) in path_items(flavour, *view, name, &list_name, gvk) {
            paths.insert(path, item);
        }
    }
    (defs, paths)
}

fn list_schema(flavour: Flavour, view: &View, item: &str, gvk: &Value) -> Value {
    json!({
        "description": format!("{} is a list of {} objects.", view.list_kind(), view.kind_name()),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."},
            "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object represents."},
            "items": {"type": "array", "description": format!("List of {}.", view.plural()), "items": flavour.reference(item)},
            "metadata": wrap_ref(flavour, "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta", "Standard list metadata."),
        },
        "x-kubernetes-group-version-kind": [gvk],
    })
}

/// A `$ref` with a description beside it: OpenAPI 3 wraps the reference in `allOf` (as the
/// real documents do); Swagger 2 keeps the sibling.
fn wrap_ref(flavour: Flavour, name: &str, description: &str) -> Value {
    match flavour {
        Flavour::V3 => json!({"allOf": [flavour.reference(name)], "description": description}),
        Flavour::V2 => {
            let mut r = flavour.reference(name);
            r["description"] = json!(description);
            r
        }
    }
}

/// A query parameter: `(name, JSON type, description)`.
type Param = (&'static str, &'static str, &'static str);

const LIST_PARAMS: &[Param] = &[
    (
        "allowWatchBookmarks",
        "boolean",
        "Ask for BOOKMARK watch events.",
    ),
    ("continue", "string", "Continue token of a paged list."),
    (
        "fieldSelector",
        "string",
        "Restrict the list by object fields.",
    ),
    (
        "labelSelector",
        "string",
        "Restrict the list by object labels.",
    ),
    ("limit", "integer", "Maximum number of items in one page."),
    (
        "resourceVersion",
        "string",
        "Which state of the collection to list or watch from.",
    ),
    (
        "resourceVersionMatch",
        "string",
        "How resourceVersion applies to a list.",
    ),
    (
        "sendInitialEvents",
        "boolean",
        "Start a watch with synthetic events for the current state.",
    ),
    ("timeoutSeconds", "integer", "Duration of a list or watch."),
    ("watch", "boolean", "Watch for changes instead of listing."),
];

const WRITE_PARAMS: &[Param] = &[
    ("dryRun", "string", "All: validate without persisting."),
    (
        "fieldManager",
        "string",
        "Name of the actor making the change.",
    ),
    (
        "fieldValidation",
        "string",
        "Ignore, Warn or Strict handling of unknown or duplicate fields.",
    ),
];

const PATCH_PARAMS: &[Param] = &[(
    "force",
    "boolean",
    "Take ownership of conflicting fields in an apply patch.",
)];

const DELETE_PARAMS: &[Param] = &[
    ("dryRun", "string", "All: validate without persisting."),
    (
        "gracePeriodSeconds",
        "integer",
        "Seconds before the object is deleted.",
    ),
    (
        "propagationPolicy",
        "string",
        "Orphan, Background or Foreground garbage collection.",
    ),
];

const PATCH_TYPES: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

fn parameter(flavour: Flavour, (name, ty, description): &Param, location: &str) -> Value {
    match flavour {
        Flavour::V3 => json!({"name": name, "in": location, "description": description,
                              "schema": {"type": ty, "uniqueItems": true}}),
        Flavour::V2 => json!({"name": name, "in": location, "description": description,
                              "type": ty, "uniqueItems": true}),
    }
}

fn group_word(group: &str) -> String {
    let base = match group {
        "" => "core",
        g => g.split('.').next().unwrap_or(g),
    };
    let mut out = String::new();
    for part in base.split('-') {
        let mut chars = part.chars();
        if let Some(c) = chars.next() {
            out.extend(c.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    if group == crate::resource::RBAC_GROUP {
        out.push_str("Authorization");
    }
    out
}

struct Op<'a> {
    method: &'static str,
    verb: &'static str,
    action: &'static str,
    description: String,
    params: Vec<&'a [Param]>,
    body: Option<Value>,
    body_types: &'a [&'a str],
    response: Value,
}

fn operation(flavour: Flavour, op: &Op<'_>, id: &str, tag: &str, gvk: &Value) -> Value {
    let mut params: Vec<Value> = op
        .params
        .iter()
        .flat_map(|p| p.iter())
        .map(|p| parameter(flavour, p, "query"))
        .collect();
    let mut o = json!({
        "description": op.description,
        "operationId": format!("{}{id}", op.verb),
        "tags": [tag],
        "x-kubernetes-action": op.action,
        "x-kubernetes-group-version-kind": gvk,
    });
    match flavour {
        Flavour::V3 => {
            o["responses"] = json!({"200": {"description": "OK", "content": {
                "application/json": {"schema": op.response},
                "application/yaml": {"schema": op.response}}}});
            if let Some(schema) = &op.body {
                let content: Map<String, Value> = op
                    .body_types
                    .iter()
                    .map(|t| (t.to_string(), json!({"schema": schema})))
                    .collect();
                o["requestBody"] = json!({"content": content, "required": op.method != "delete"});
            }
        }
        Flavour::V2 => {
            o["responses"] = json!({"200": {"description": "OK", "schema": op.response}});
            o["consumes"] = json!(op.body_types);
            o["produces"] = json!(["application/json", "application/yaml"]);
            o["schemes"] = json!(["https"]);
            if let Some(schema) = &op.body {
                params.push(json!({"name": "body", "in": "body", "required": op.method != "delete", "schema": schema}));
            }
        }
    }
    o["parameters"] = json!(params);
    o
}

fn path_items(
    flavour: Flavour,
    view: View,
    name: &str,
    list_name: &str,
    gvk: &Value,
) -> Vec<(String, Value)> {
    let prefix = match view.group() {
        "" => "/api/v1".to_string(),
        g => format!("/apis/{g}/v1"),
    };
    let namespaced = view.kind().namespaced();
    let scope = if namespaced { "Namespaced" } else { "" };
    let id = format!("{}V1{scope}{}", group_word(view.group()), view.kind_name());
    let tag = format!(
        "{}_v1",
        match view.group() {
            "" => "core".to_string(),
            g => g.split('.').next().unwrap_or(g).replace('-', "_"),
        }
    );
    let kind = view.kind_name();
    let object = flavour.reference(name);
    let list = flavour.reference(list_name);
    let status = flavour.reference("io.k8s.apimachinery.pkg.apis.meta.v1.Status");
    let json_only: &[&str] = &["application/json", "application/yaml"];
    let patch_body = json!({"type": "object", "description": "The patch document."});
    let ns_param = json!({"name": "namespace", "in": "path", "required": true,
        "description": "object name and auth scope, such as for teams and projects", "type": "string", "uniqueItems": true});
    let name_param = |what: &str| {
        json!({"name": "name", "in": "path", "required": true,
            "description": format!("name of the {what}"), "type": "string", "uniqueItems": true})
    };
    let to_flavour = |p: Value| match flavour {
        Flavour::V2 => p,
        Flavour::V3 => {
            let mut p = p;
            if let Some(m) = p.as_object_mut() {
                let ty = m.remove("type").unwrap_or(json!("string"));
                m.remove("uniqueItems");
                m.insert("schema".into(), json!({"type": ty, "uniqueItems": true}));
            }
            p
        }
    };
    let mut collection_params = Vec::new();
    if namespaced {
        collection_params.push(to_flavour(ns_param.clone()));
    }
    let mut item_params = vec![to_flavour(name_param(kind))];
    if namespaced {
        item_params.push(to_flavour(ns_param));
    }
    let pretty: Param = (
        "pretty",
        "string",
        "If 'true', then the output is pretty printed.",
    );
    collection_params.push(parameter(flavour, &pretty, "query"));
    item_params.push(parameter(flavour, &pretty, "query"));

    let ns_segment = if namespaced {
        "/namespaces/{namespace}"
    } else {
        ""
    };
    let collection = format!("{prefix}{ns_segment}/{}", view.plural());
    let item = format!("{collection}/{{name}}");

    let list_op = Op {
        method: "get",
        verb: "list",
        action: "list",
        description: format!("list or watch objects of kind {kind}"),
        params: vec![LIST_PARAMS],
        body: None,
        body_types: &[],
        response: list.clone(),
    };
    let mut coll = json!({
        "get": operation(flavour, &list_op, &id, &tag, gvk),
        "post": operation(flavour, &Op {
            method: "post", verb: "create", action: "post",
            description: format!("create a {kind}"),
            params: vec![WRITE_PARAMS], body: Some(object.clone()), body_types: json_only,
            response: object.clone(),
        }, &id, &tag, gvk),
    });
    coll["parameters"] = json!(collection_params);
    let item_ops = |suffix: &str, what: &str| {
        json!({
            "get": operation(flavour, &Op {
                method: "get", verb: "read", action: "get",
                description: format!("read {what} of the specified {kind}"),
                params: vec![], body: None, body_types: &[], response: object.clone(),
            }, &format!("{id}{suffix}"), &tag, gvk),
            "put": operation(flavour, &Op {
                method: "put", verb: "replace", action: "put",
                description: format!("replace {what} of the specified {kind}"),
                params: vec![WRITE_PARAMS], body: Some(object.clone()), body_types: json_only,
                response: object.clone(),
            }, &format!("{id}{suffix}"), &tag, gvk),
            "patch": operation(flavour, &Op {
                method: "patch", verb: "patch", action: "patch",
                description: format!("partially update {what} of the specified {kind}"),
                params: vec![WRITE_PARAMS, PATCH_PARAMS], body: Some(patch_body.clone()),
                body_types: PATCH_TYPES, response: object.clone(),
            }, &format!("{id}{suffix}"), &tag, gvk),
        })
    };
    let mut one = item_ops("", "the object");
    one["delete"] = operation(
        flavour,
        &Op {
            method: "delete",
            verb: "delete",
            action: "delete",
            description: format!("delete a {kind}"),
            params: vec![DELETE_PARAMS],
            body: Some(flavour.reference("io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions")),
            body_types: json_only,
            response: status,
        },
        &id,
        &tag,
        gvk,
    );
    one["parameters"] = json!(item_params.clone());
    let mut out = vec![(collection, coll), (item.clone(), one)];
    if namespaced {
        // The all-namespaces collection (list and watch only).
        let mut all = json!({"get": operation(flavour, &list_op, &format!("{}V1{kind}ForAllNamespaces", group_word(view.group())), &tag, gvk)});
        all["parameters"] = json!([parameter(flavour, &pretty, "query")]);
        out.push((format!("{prefix}/{}", view.plural()), all));
    }
    if view == View::Node {
        let mut status_item = item_ops("Status", "status");
        status_item["parameters"] = json!(item_params);
        out.push((format!("{item}/status"), status_item));
    }
    out
}

fn info() -> Value {
    json!({"title": "Kubernetes", "version": GIT_VERSION})
}

fn content_hash(bytes: &[u8]) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    format!("{:016X}", h.finish())
}

fn build() -> Documents {
    let mut v3 = BTreeMap::new();
    let mut index = Map::new();
    for (key, views) in group_versions() {
        let (schemas, paths) = render(&views, Flavour::V3);
        let doc = json!({
            "openapi": "3.0.0",
            "info": info(),
            "paths": paths,
            "components": {
                "schemas": schemas,
                "securitySchemes": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication", "name": "authorization", "in": "header"}},
            },
        });
        let body = serde_json::to_vec(&doc).unwrap_or_default();
        let hash = content_hash(&body);
        index.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}")}),
        );
        v3.insert(key, GroupVersionDoc { hash, body });
    }
    let (definitions, paths) = render(&View::ALL, Flavour::V2);
    let v2 = json!({
        "swagger": "2.0",
        "info": info(),
        "paths": paths,
        "definitions": definitions,
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication", "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    });
    Documents {
        index: serde_json::to_vec(&json!({"paths": index})).unwrap_or_default(),
        v3,
        v2: serde_json::to_vec(&v2).unwrap_or_default(),
    }
}

/// Whether an Accept header admits JSON (absent, `*/*`, `application/*`, `application/json`).
pub fn accepts_json(accept: &str) -> bool {
    accept.trim().is_empty()
        || accept.split(',').any(|part| {
            let media = part.split(';').next().unwrap_or("").trim();
            matches!(media, "*/*" | "application/*" | "application/json")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(key: &str) -> Value {
        serde_json::from_slice(&DOCUMENTS.v3[key].body).unwrap()
    }

    #[test]
    fn index_lists_every_group_version_with_its_hash() {
        let index: Value = serde_json::from_slice(&DOCUMENTS.index).unwrap();
        let paths = index["paths"].as_object().unwrap();
        let keys: Vec<&str> = paths.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "api/v1",
                "apis/coordination.k8s.io/v1",
                "apis/events.k8s.io/v1",
                "apis/rbac.authorization.k8s.io/v1"
            ]
        );
        let url = paths["api/v1"]["serverRelativeURL"].as_str().unwrap();
        assert_eq!(
            url,
            format!("/openapi/v3/api/v1?hash={}", DOCUMENTS.v3["api/v1"].hash)
        );
    }

    #[test]
    fn kinds_carry_their_group_version_kind_and_schema_from_k8s_openapi() {
        let d = doc("api/v1");
        let schemas = &d["components"]["schemas"];
        let node = &schemas["io.k8s.api.core.v1.Node"];
        assert_eq!(
            node["x-kubernetes-group-version-kind"],
            json!([{"group": "", "kind": "Node", "version": "v1"}])
        );
        // A reference with a description is wrapped in allOf, as upstream v3 documents are.
        assert_eq!(
            node["properties"]["spec"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.NodeSpec"
        );
        let taints = &schemas["io.k8s.api.core.v1.NodeSpec"]["properties"]["taints"];
        assert_eq!(taints["type"], "array");
        assert_eq!(
            taints["items"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.Taint"
        );
        assert!(
            schemas["io.k8s.api.core.v1.Taint"]["properties"]["effect"]["description"]
                .as_str()
                .unwrap()
                .contains("NoSchedule")
        );
        assert_eq!(
            schemas["io.k8s.api.core.v1.NodeList"]["x-kubernetes-group-version-kind"][0]["kind"],
            "NodeList"
        );
        let rbac = doc("apis/rbac.authorization.k8s.io/v1");
        assert_eq!(
            rbac["components"]["schemas"]["io.k8s.api.rbac.v1.ClusterRole"]["x-kubernetes-group-version-kind"],
            json!([{"group": "rbac.authorization.k8s.io", "kind": "ClusterRole", "version": "v1"}])
        );
    }

    #[test]
    fn patch_operations_offer_field_validation() {
        let d = doc("apis/coordination.k8s.io/v1");
        let patch = &d["paths"]["/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"]
            ["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "coordination.k8s.io", "kind": "Lease", "version": "v1"})
        );
        assert_eq!(patch["operationId"], "patchCoordinationV1NamespacedLease");
        let names: Vec<&str> = patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"fieldValidation"), "{names:?}");
        let node_status = &doc("api/v1")["paths"]["/api/v1/nodes/{name}/status"]["patch"];
        assert_eq!(node_status["operationId"], "patchCoreV1NodeStatus");
    }

    #[test]
    fn v2_uses_definitions() {
        let v2: Value = serde_json::from_slice(&DOCUMENTS.v2).unwrap();
        assert_eq!(v2["swagger"], "2.0");
        assert_eq!(
            v2["definitions"]["io.k8s.api.core.v1.Node"]["properties"]["spec"]["allOf"][0]["$ref"],
            "#/definitions/io.k8s.api.core.v1.NodeSpec"
        );
        assert!(v2["paths"]["/apis/events.k8s.io/v1/namespaces/{namespace}/events"].is_object());
    }

    #[test]
    fn accept_negotiation() {
        assert!(accepts_json(""));
        assert!(accepts_json("application/json, */*"));
        assert!(!accepts_json(
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
        ));
    }
}
