//! ARM resource ID parsing. Pure.
//!
//! ARM IDs are case-insensitive and real ones mix casings (AKS writes `MC_...` in ARM IDs but
//! the lower-cased resource group in providerIDs), so every comparison here lower-cases.

/// Where a node's VM lives, from its providerID or from a NIC ipConfiguration ID.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum VmRef {
    /// A VMSS Uniform instance: resource group, scale set, instance id (all lower-cased).
    ScaleSetVm {
        resource_group: String,
        scale_set: String,
        instance: String,
    },
    /// A standalone VM (availability set or VMSS Flex): resource group and VM name.
    Vm {
        resource_group: String,
        name: String,
    },
}

/// Splits an ARM path into lower-cased segments, ignoring empty ones.
fn segments(id: &str) -> Vec<String> {
    id.split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// Value following the segment `key` (case-insensitive), if any.
fn after<'a>(segs: &'a [String], key: &str) -> Option<&'a str> {
    segs.iter()
        .position(|s| s == key)
        .and_then(|i| segs.get(i + 1))
        .map(String::as_str)
}

/// Parses a Kubernetes `spec.providerID` (`azure:///subscriptions/...`).
pub fn parse_provider_id(provider_id: &str) -> Option<VmRef> {
    let rest = provider_id.strip_prefix("azure://")?;
    let segs = segments(rest);
    let rg = after(&segs, "resourcegroups")?.to_string();
    if let Some(vmss) = after(&segs, "virtualmachinescalesets") {
        let instance = after(&segs, "virtualmachines")?;
        return Some(VmRef::ScaleSetVm {
            resource_group: rg,
            scale_set: vmss.to_string(),
            instance: instance.to_string(),
        });
    }
    let name = after(&segs, "virtualmachines")?;
    Some(VmRef::Vm {
        resource_group: rg,
        name: name.to_string(),
    })
}

/// What a NIC ipConfiguration ID points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpConfigOwner {
    /// `.../Microsoft.Compute/virtualMachineScaleSets/{vmss}/virtualMachines/{id}/networkInterfaces/...`
    ScaleSetVm(VmRef),
    /// `.../Microsoft.Network/networkInterfaces/{nic}/ipConfigurations/...`: the lower-cased NIC
    /// ID (without the ipConfiguration part), to be mapped to its VM through the NIC list.
    Nic(String),
}

/// Parses a NIC ipConfiguration ID as found in NIC-based backend pools.
pub fn parse_ip_configuration_id(id: &str) -> Option<IpConfigOwner> {
    let segs = segments(id);
    let rg = after(&segs, "resourcegroups")?.to_string();
    if let Some(vmss) = after(&segs, "virtualmachinescalesets") {
        let instance = after(&segs, "virtualmachines")?;
        return Some(IpConfigOwner::ScaleSetVm(VmRef::ScaleSetVm {
            resource_group: rg,
            scale_set: vmss.to_string(),
            instance: instance.to_string(),
        }));
    }
    let nic_pos = segs.iter().position(|s| s == "networkinterfaces")?;
    segs.get(nic_pos + 1)?;
    Some(IpConfigOwner::Nic(format!(
        "/{}",
        segs[..nic_pos + 2].join("/")
    )))
}

/// Parses a VM ID (`.../Microsoft.Compute/virtualMachines/{name}`), as NICs reference their VM.
pub fn parse_vm_id(id: &str) -> Option<VmRef> {
    let segs = segments(id);
    let rg = after(&segs, "resourcegroups")?.to_string();
    if segs.iter().any(|s| s == "virtualmachinescalesets") {
        return parse_provider_id(&format!("azure://{id}"));
    }
    Some(VmRef::Vm {
        resource_group: rg,
        name: after(&segs, "virtualmachines")?.to_string(),
    })
}

/// AKS names VMSS Uniform nodes `<scale set><instance id as 6 base-36 digits>`; used when a
/// request carries only the node name.
pub fn scale_set_vm_from_node_name(node_name: &str) -> Option<(String, String)> {
    let lower = node_name.to_ascii_lowercase();
    if lower.len() <= 6 || !lower.is_ascii() {
        return None;
    }
    let (set, suffix) = lower.split_at(lower.len() - 6);
    if !set.ends_with("vmss") {
        return None;
    }
    let instance = u64::from_str_radix(suffix, 36).ok()?;
    Some((set.to_string(), instance.to_string()))
}

/// True when two ARM IDs name the same resource.
pub fn same_id(a: &str, b: &str) -> bool {
    a.trim_end_matches('/')
        .eq_ignore_ascii_case(b.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_of_uniform_and_standalone_vms() {
        let uniform = "azure:///subscriptions/S/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachineScaleSets/aks-np-1-vmss/virtualMachines/12";
        assert_eq!(
            parse_provider_id(uniform),
            Some(VmRef::ScaleSetVm {
                resource_group: "mc_rg".into(),
                scale_set: "aks-np-1-vmss".into(),
                instance: "12".into()
            })
        );
        let vm = "azure:///subscriptions/S/resourceGroups/MC_RG/providers/Microsoft.Compute/virtualMachines/Flex-VM_1";
        assert_eq!(
            parse_provider_id(vm),
            Some(VmRef::Vm {
                resource_group: "mc_rg".into(),
                name: "flex-vm_1".into()
            })
        );
        assert_eq!(parse_provider_id("aws:///us-east-1a/i-123"), None);
        assert_eq!(parse_provider_id(""), None);
    }

    #[test]
    fn ip_configuration_ids_compare_case_insensitively() {
        let vmss = "/subscriptions/S/resourceGroups/MC_RG/providers/Microsoft.Compute/virtualMachineScaleSets/AKS-NP-1-VMSS/virtualMachines/12/networkInterfaces/aks-np-1-vmss/ipConfigurations/ipconfigv6";
        let from_provider = parse_provider_id(
            "azure:///subscriptions/S/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachineScaleSets/aks-np-1-vmss/virtualMachines/12",
        )
        .unwrap();
        assert_eq!(
            parse_ip_configuration_id(vmss),
            Some(IpConfigOwner::ScaleSetVm(from_provider))
        );
        let nic = "/subscriptions/S/resourceGroups/RG/providers/Microsoft.Network/networkInterfaces/VM1-nic/ipConfigurations/ipconfig1";
        assert_eq!(
            parse_ip_configuration_id(nic),
            Some(IpConfigOwner::Nic(
                "/subscriptions/s/resourcegroups/rg/providers/microsoft.network/networkinterfaces/vm1-nic".into()
            ))
        );
        assert_eq!(parse_ip_configuration_id("/garbage"), None);
        assert!(same_id("/A/b/", "/a/B"));
    }

    #[test]
    fn node_name_fallback_decodes_base36_instance() {
        assert_eq!(
            scale_set_vm_from_node_name("aks-nodepool1-12345678-vmss00000a"),
            Some(("aks-nodepool1-12345678-vmss".into(), "10".into()))
        );
        assert_eq!(scale_set_vm_from_node_name("worker-1"), None);
        assert_eq!(scale_set_vm_from_node_name("vmss"), None);
    }

    #[test]
    fn vm_ids_from_nics() {
        assert_eq!(
            parse_vm_id(
                "/subscriptions/S/resourceGroups/RG/providers/Microsoft.Compute/virtualMachines/VM1"
            ),
            Some(VmRef::Vm {
                resource_group: "rg".into(),
                name: "vm1".into()
            })
        );
    }
}
