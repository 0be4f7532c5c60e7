//! A network interface as the NIC LIST of the node resource group sends it
//! (`Microsoft.Network/networkInterfaces`), reduced to the fields cutover reads. Pure.
//!
//! Entries of NIC-based pools name a NIC's ipConfiguration (`{NIC ID}/ipConfigurations/{name}`);
//! for a standalone VM (VMSS Flex, availability set) the VM behind that NIC is known only from
//! the NIC itself. So two fields are read, and nothing else: the NIC's `id` and
//! `properties.virtualMachine.id`.
//!
//! Lenient where ARM is: every other field is ignored whatever it holds (a type that changed in
//! a newer api-version, a field added tomorrow), a missing or `null` field is absent, and a NIC
//! without `virtualMachine` is detached (no VM to map; not an error). Strict where it matters:
//! a NIC whose own two fields have another type, or whose IDs do not parse, is [`Unreadable`],
//! returned with the NIC and the reason so that the caller reports it (the ARM client logs and
//! counts it) rather than dropping it.

use super::ids::{self, IpConfigOwner, VmRef};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// The fields of a NIC that cutover reads; everything else is ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(expecting = "a network interface object")]
pub struct NetworkInterface {
    #[serde(default, deserialize_with = "nic_id")]
    pub id: Option<String>,
    #[serde(default)]
    pub properties: Option<Properties>,
}

/// `properties` of a NIC, reduced to the VM it is attached to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(expecting = "`properties` as an object")]
pub struct Properties {
    #[serde(default, rename = "virtualMachine")]
    pub virtual_machine: Option<VirtualMachine>,
}

/// `properties.virtualMachine`: a sub-resource, of which only the ID is read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(expecting = "`properties.virtualMachine` as an object")]
pub struct VirtualMachine {
    #[serde(default, deserialize_with = "vm_id")]
    pub id: Option<String>,
}

/// A string field or nothing, the error naming the field.
fn text<'de, D: Deserializer<'de>>(d: D, field: &str) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(d).map_err(|e| D::Error::custom(format!("`{field}`: {e}")))
}

fn nic_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    text(d, "id")
}

fn vm_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    text(d, "properties.virtualMachine.id")
}

/// A NIC read: its ID (as ARM sent it) and the VM it is attached to, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nic {
    pub id: String,
    pub vm: Option<VmRef>,
}

/// A NIC whose fields cutover reads could not be read: which one, and why. Backend entries on
/// it match no node until it can be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The NIC's `id` when it is a string, else its `name`, else `(no id)`.
    pub nic: String,
    pub reason: String,
}

/// Reads one NIC object of the NIC LIST.
pub fn read(raw: &Value) -> Result<Nic, Unreadable> {
    let unreadable = |reason: String| Unreadable {
        nic: label(raw),
        reason,
    };
    let nic = NetworkInterface::deserialize(raw).map_err(|e| unreadable(e.to_string()))?;
    let Some(id) = nic.id else {
        return Err(unreadable("no `id`".into()));
    };
    if !matches!(
        ids::parse_ip_configuration_id(&id),
        Some(IpConfigOwner::Nic(_))
    ) {
        return Err(unreadable("`id` is not a network interface ID".into()));
    }
    let Some(vm) = nic.properties.and_then(|p| p.virtual_machine) else {
        return Ok(Nic { id, vm: None });
    };
    let Some(vm_id) = vm.id else {
        return Err(unreadable("`properties.virtualMachine` has no `id`".into()));
    };
    match ids::parse_vm_id(&vm_id) {
        Some(vm) => Ok(Nic { id, vm: Some(vm) }),
        None => Err(unreadable(format!(
            "`properties.virtualMachine.id` is not a virtual machine ID: {vm_id}"
        ))),
    }
}

/// How a NIC is named in a report: its `id`, else its `name`, whatever else is wrong with it.
fn label(raw: &Value) -> String {
    if let Some(id) = raw.get("id").and_then(Value::as_str) {
        return id.to_string();
    }
    match raw.get("name").and_then(Value::as_str) {
        Some(name) => format!("(no id; name {name})"),
        None => "(no id)".into(),
    }
}

#[cfg(test)]
#[path = "nic_tests.rs"]
mod tests;
