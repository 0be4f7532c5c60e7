//! Turning PUT bodies into stored resources (pure). Replace semantics: the body is the whole
//! resource; what it omits is gone.
//!
//! readOnly fields: ARM's RPC says clients may echo readOnly properties back (they GET, modify and
//! PUT the same document, as the Rust and Python SDK models do), so the simulator **ignores**
//! `provisioningState`, `backendIPConfigurations`, `loadBalancingRules`, `outboundRules`,
//! `inboundNatRules`, `outboundRule` and `inboundNatRulesPortMapping` (keeping the stored values).
//! The one readOnly field it checks is `networkInterfaceIPConfiguration`: echoing a member's own
//! ID is fine, but naming an ipConfiguration that is not a member would be an attempt to change
//! NIC-owned membership through the pool, which NRP refuses (contracts/arm.md 1.2, 1.3, 7.5), so
//! that is a 400. NIC-based pools keep their membership (it is owned by the NICs); entries the
//! body omits keep existing with `adminState` cleared. `adminState` must be `None|Up|Down`.

use crate::errors::ArmError;
use crate::model::{Address, AdminState, LoadBalancer, Pool};
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};

const POOL_READ_ONLY: &[&str] = &[
    "provisioningState",
    "backendIPConfigurations",
    "loadBalancingRules",
    "outboundRules",
    "inboundNatRules",
    "outboundRule",
    "loadBalancerBackendAddresses",
];

fn as_object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, ArmError> {
    v.as_object()
        .ok_or_else(|| ArmError::invalid_content(&format!("{what} must be a JSON object")))
}

/// Builds the pool a PUT body describes, given what is stored under that name.
pub fn pool_from_body(name: &str, body: &Value, existing: Option<&Pool>) -> Result<Pool, ArmError> {
    let obj = as_object(body, "the backend address pool")?;
    if let Some(body_name) = obj.get("name").and_then(Value::as_str)
        && !body_name.eq_ignore_ascii_case(name)
    {
        return Err(ArmError::invalid_format(format!(
            "The name '{body_name}' in the request body does not match the name '{name}' in the URL."
        )));
    }
    let empty = Map::new();
    let props = match obj.get("properties") {
        None | Some(Value::Null) => &empty,
        Some(p) => as_object(p, "properties")?,
    };
    let mut pool = match existing {
        Some(e) => e.clone(),
        None => Pool::new_ip_based(name),
    };
    // Writable pool-level properties are replaced; readOnly ones keep their stored values.
    let kept: Map<String, Value> = pool
        .props
        .iter()
        .filter(|(k, _)| POOL_READ_ONLY.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    pool.props = kept;
    for (k, v) in props {
        if !POOL_READ_ONLY.contains(&k.as_str()) {
            pool.props.insert(k.clone(), v.clone());
        }
    }
    let entries = match props.get("loadBalancerBackendAddresses") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => {
            return Err(ArmError::invalid_content(
                "properties.loadBalancerBackendAddresses must be an array",
            ));
        }
    };
    pool.addresses = if pool.nic_based {
        nic_entries(&pool, &entries)?
    } else {
        ip_entries(&pool, &entries)?
    };
    Ok(pool)
}

struct Entry<'a> {
    name: Option<&'a str>,
    props: Map<String, Value>,
    admin: Option<AdminState>,
}

fn parse_entry(i: usize, v: &Value) -> Result<Entry<'_>, ArmError> {
    let obj = as_object(v, "a loadBalancerBackendAddresses entry")?;
    let name = match obj.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => {
            return Err(ArmError::invalid_content(
                "loadBalancerBackendAddresses[].name must be a string",
            ));
        }
    };
    let mut props = match obj.get("properties") {
        None | Some(Value::Null) => Map::new(),
        Some(p) => as_object(p, "loadBalancerBackendAddresses[].properties")?.clone(),
    };
    let admin = match props.remove("adminState") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(AdminState::parse(&s).ok_or_else(|| {
            ArmError::invalid_format(format!(
                "Backend address {} has an invalid adminState '{s}'. Allowed values are None, Up, Down.",
                name.unwrap_or("")
            ))
        })?),
        Some(other) => {
            return Err(ArmError::invalid_format(format!(
                "loadBalancerBackendAddresses[{i}].properties.adminState must be one of None, Up, Down, got {other}."
            )));
        }
    };
    props.remove("provisioningState");
    props.remove("inboundNatRulesPortMapping");
    Ok(Entry { name, props, admin })
}

/// Where each key first appears among `keys` (a 5,000-entry pool is matched against a body
/// in one pass, not one scan of the pool per entry).
fn first_index<'a>(
    keys: impl Iterator<Item = Option<&'a str>>,
    fold: bool,
) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for (i, k) in keys.enumerate() {
        if let Some(k) = k {
            let k = if fold {
                k.to_ascii_lowercase()
            } else {
                k.to_owned()
            };
            out.entry(k).or_insert(i);
        }
    }
    out
}

fn ip_entries(pool: &Pool, entries: &[Value]) -> Result<Vec<Address>, ArmError> {
    let known = first_index(pool.addresses.iter().map(|a| Some(a.name.as_str())), false);
    let mut names = HashSet::new();
    let mut out = Vec::with_capacity(entries.len());
    for (i, v) in entries.iter().enumerate() {
        let e = parse_entry(i, v)?;
        let name = e.name.ok_or_else(|| {
            ArmError::invalid_format(format!(
                "loadBalancerBackendAddresses[{i}] must have a name."
            ))
        })?;
        if !names.insert(name.to_ascii_lowercase()) {
            return Err(ArmError::invalid_format(format!(
                "Backend address name '{name}' is used more than once in backend address pool {}.",
                pool.name
            )));
        }
        if e.props.contains_key("networkInterfaceIPConfiguration") {
            return Err(ArmError::invalid_format(format!(
                "Backend address {name}: networkInterfaceIPConfiguration is read-only; NIC-based membership is set on the network interface, not on an IP-based backend address pool."
            )));
        }
        match e.props.get("ipAddress") {
            Some(Value::String(ip)) => {
                if ip.parse::<std::net::IpAddr>().is_err() {
                    return Err(ArmError::invalid_format(format!(
                        "Backend address {name} has an invalid ipAddress '{ip}'."
                    )));
                }
            }
            None if e.props.contains_key("loadBalancerFrontendIPConfiguration") => {}
            _ => {
                return Err(ArmError::invalid_format(format!(
                    "Backend address {name} must specify an ipAddress."
                )));
            }
        }
        let effective = known
            .get(name)
            .map(|&k| pool.addresses[k].effective)
            .unwrap_or(AdminState::None);
        out.push(Address {
            name: name.to_owned(),
            props: e.props,
            admin_state: e.admin,
            effective,
        });
    }
    Ok(out)
}

fn nic_entries(pool: &Pool, entries: &[Value]) -> Result<Vec<Address>, ArmError> {
    let mut requested: Vec<Option<AdminState>> = vec![None; pool.addresses.len()];
    // Names and NIC references match case-insensitively, as ARM compares IDs.
    let names = first_index(pool.addresses.iter().map(|a| Some(a.name.as_str())), true);
    let nics = first_index(
        pool.addresses.iter().map(Address::nic_ip_configuration),
        true,
    );
    for (i, v) in entries.iter().enumerate() {
        let e = parse_entry(i, v)?;
        let by_name = e
            .name
            .and_then(|n| names.get(&n.to_ascii_lowercase()).copied());
        let nic = e
            .props
            .get("networkInterfaceIPConfiguration")
            .and_then(|v| v.get("id"))
            .and_then(Value::as_str);
        let by_nic = nic.and_then(|id| nics.get(&id.to_ascii_lowercase()).copied());
        let idx = match (by_name, by_nic, nic) {
            (Some(a), Some(b), _) if a != b => None,
            (Some(a), _, None) => Some(a),
            (Some(a), Some(_), Some(_)) => Some(a),
            (None, Some(b), _) => Some(b),
            _ => None,
        };
        let Some(idx) = idx else {
            if e.props.contains_key("ipAddress") {
                return Err(ArmError::invalid_format(format!(
                    "Backend address pool {} is NIC-based; IP addresses cannot be added to it.",
                    pool.name
                )));
            }
            return Err(ArmError::invalid_format(format!(
                "Backend address {} does not reference a member of backend address pool {}: networkInterfaceIPConfiguration is read-only and membership is set on the network interface.",
                e.name.unwrap_or(""),
                pool.name
            )));
        };
        requested[idx] = e.admin;
    }
    Ok(pool
        .addresses
        .iter()
        .zip(requested)
        .map(|(a, admin)| Address {
            admin_state: admin,
            ..a.clone()
        })
        .collect())
}

/// Builds the load balancer a whole-LB PUT describes.
pub fn lb_from_body(
    name: &str,
    body: &Value,
    existing: Option<&LoadBalancer>,
    default_location: &str,
) -> Result<LoadBalancer, ArmError> {
    let obj = as_object(body, "the load balancer")?;
    let mut lb = match existing {
        Some(e) => e.clone(),
        None => {
            let location = obj
                .get("location")
                .and_then(Value::as_str)
                .unwrap_or(default_location);
            if location.is_empty() {
                return Err(ArmError::location_required());
            }
            LoadBalancer::new(name, location)
        }
    };
    if let Some(sku) = obj.get("sku") {
        lb.sku = sku.clone();
    }
    lb.tags = obj.get("tags").cloned();
    let empty = Map::new();
    let props = match obj.get("properties") {
        None | Some(Value::Null) => &empty,
        Some(p) => as_object(p, "properties")?,
    };
    let pool_bodies = match props.get("backendAddressPools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => {
            return Err(ArmError::invalid_content(
                "properties.backendAddressPools must be an array",
            ));
        }
    };
    let mut pools = Vec::with_capacity(pool_bodies.len());
    let mut seen = HashSet::new();
    for (i, p) in pool_bodies.iter().enumerate() {
        let pname = p.get("name").and_then(Value::as_str).ok_or_else(|| {
            ArmError::invalid_format(format!(
                "properties.backendAddressPools[{i}] must have a name."
            ))
        })?;
        if !seen.insert(pname.to_ascii_lowercase()) {
            return Err(ArmError::invalid_format(format!(
                "Backend address pool name '{pname}' is used more than once."
            )));
        }
        pools.push(pool_from_body(pname, p, lb.pool(pname))?);
    }
    lb.pools = pools;
    lb.props = props
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "backendAddressPools" | "provisioningState" | "resourceGuid"
            )
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    crate::structure::normalize(&mut lb.props);
    Ok(lb)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nic_pool() -> Pool {
        Pool::new_nic_based(
            "kubernetes",
            &[
                "/x/nic1/ipConfigurations/ipconfig1".into(),
                "/x/nic2/ipConfigurations/ipconfig1".into(),
            ],
        )
    }

    #[test]
    fn ip_pool_put_replaces_entries_and_validates_admin_state() {
        let body = json!({"properties": {"loadBalancerBackendAddresses": [
            {"name": "n1", "properties": {"ipAddress": "10.0.0.4", "adminState": "Down"}},
            {"name": "n2", "properties": {"ipAddress": "10.0.0.5"}}]}});
        let p = pool_from_body("pool", &body, None).unwrap();
        assert_eq!(p.addresses.len(), 2);
        assert_eq!(p.addresses[0].admin_state, Some(AdminState::Down));
        assert_eq!(p.addresses[0].effective, AdminState::None);
        let bad = json!({"properties": {"loadBalancerBackendAddresses": [
            {"name": "n1", "properties": {"ipAddress": "10.0.0.4", "adminState": "Drain"}}]}});
        let e = pool_from_body("pool", &bad, Some(&p)).unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.code.as_str()),
            (400, "InvalidRequestFormat")
        );
        let e = pool_from_body("pool", &json!({"properties": {"loadBalancerBackendAddresses": [{"name": "x", "properties": {}}]}}), None).unwrap_err();
        assert!(e.message.contains("ipAddress"));
    }

    #[test]
    fn nic_pool_keeps_membership_and_matches_by_name_or_id() {
        let pool = nic_pool();
        let guid = pool.addresses[1].name.clone();
        let body = json!({"properties": {"loadBalancerBackendAddresses": [
            {"name": guid, "properties": {"adminState": "Down",
              "networkInterfaceIPConfiguration": {"id": "/X/NIC2/ipConfigurations/ipconfig1"}}}]}});
        let p = pool_from_body("kubernetes", &body, Some(&pool)).unwrap();
        assert_eq!(p.addresses.len(), 2);
        assert_eq!(p.addresses[0].admin_state, None);
        assert_eq!(p.addresses[1].admin_state, Some(AdminState::Down));
        assert_eq!(p.backend_ip_configurations, pool.backend_ip_configurations);
        let by_id = json!({"properties": {"loadBalancerBackendAddresses": [
            {"properties": {"adminState": "Up", "networkInterfaceIPConfiguration": {"id": "/x/nic1/ipConfigurations/ipconfig1"}}}]}});
        let p = pool_from_body("kubernetes", &by_id, Some(&pool)).unwrap();
        assert_eq!(p.addresses[0].admin_state, Some(AdminState::Up));
        let foreign = json!({"properties": {"loadBalancerBackendAddresses": [
            {"name": "new", "properties": {"networkInterfaceIPConfiguration": {"id": "/x/nic9/ipConfigurations/ipconfig1"}}}]}});
        assert_eq!(
            pool_from_body("kubernetes", &foreign, Some(&pool))
                .unwrap_err()
                .status
                .as_u16(),
            400
        );
    }

    #[test]
    fn read_only_pool_properties_are_ignored() {
        let mut pool = Pool::new_ip_based("p");
        pool.props
            .insert("loadBalancingRules".into(), json!([{"id": "r1"}]));
        let body = json!({"properties": {"loadBalancingRules": [], "provisioningState": "Failed", "virtualNetwork": {"id": "v"}}});
        let p = pool_from_body("p", &body, Some(&pool)).unwrap();
        assert_eq!(p.props["loadBalancingRules"], json!([{"id": "r1"}]));
        assert_eq!(p.props["virtualNetwork"], json!({"id": "v"}));
        assert_eq!(p.provisioning_state, "Succeeded");
    }

    #[test]
    fn lb_put_replaces_pools_and_keeps_other_properties() {
        let mut lb = LoadBalancer::new("kubernetes", "eastus");
        lb.pools.push(nic_pool());
        lb.pools.push(Pool::new_ip_based("gone"));
        let body = json!({"location": "eastus", "properties": {
            "frontendIPConfigurations": [{"name": "fe"}],
            "backendAddressPools": [{"name": "kubernetes", "properties": {}}]}});
        let out = lb_from_body("kubernetes", &body, Some(&lb), "eastus").unwrap();
        assert_eq!(out.pools.len(), 1);
        assert!(out.pools[0].nic_based);
        assert_eq!(
            out.props["frontendIPConfigurations"],
            json!([{"name": "fe"}])
        );
        assert!(lb_from_body("x", &json!([1]), None, "eastus").is_err());
    }
}
