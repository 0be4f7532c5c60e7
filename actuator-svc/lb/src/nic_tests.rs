use super::*;
use serde_json::json;

/// The official `NetworkInterfaces_List` example (`vectors/README.md`).
fn example_nics() -> Vec<Value> {
    let doc: Value = serde_json::from_str(include_str!("vectors/NetworkInterfaceList.json"))
        .expect("the vector parses");
    doc["responses"]["200"]["body"]["value"]
        .as_array()
        .expect("a NIC list")
        .clone()
}

fn vm(rg: &str, name: &str) -> Option<VmRef> {
    Some(VmRef::Vm {
        resource_group: rg.into(),
        name: name.into(),
    })
}

#[test]
fn the_official_example_reads_one_attached_and_one_detached_nic() {
    let nics = example_nics();
    assert_eq!(
        read(&nics[0]),
        Ok(Nic {
            id: "/subscriptions/subid/resourceGroups/rg1/providers/Microsoft.Network/networkInterfaces/test-nic".into(),
            vm: vm("rg1", "vm1"),
        })
    );
    assert_eq!(
        read(&nics[1]),
        Ok(Nic {
            id: "/subscriptions/subid/resourceGroups/rg1/providers/Microsoft.Network/networkInterfaces/test-nic2".into(),
            vm: None,
        })
    );
}

#[test]
fn nics_as_arm_sim_renders_them_read() {
    let mut nic = arm_sim::model::Nic {
        name: "aks-flex-12345678-vm1-nic".into(),
        location: "westeurope".into(),
        virtual_machine_id: Some(
            "/subscriptions/S/resourceGroups/MC_rg/providers/Microsoft.Compute/virtualMachines/AKS-Flex-12345678-VM1".into(),
        ),
        subnet_id: Some(
            "/subscriptions/S/resourceGroups/MC_rg/providers/Microsoft.Network/virtualNetworks/v/subnets/s".into(),
        ),
        ip_configurations: vec![arm_sim::model::NicIpConfiguration {
            name: "ipconfig1".into(),
            private_ip_address: "10.224.0.7".into(),
            primary: true,
            load_balancer_backend_address_pools: vec![
                "/subscriptions/S/resourceGroups/MC_rg/providers/Microsoft.Network/loadBalancers/kubernetes/backendAddressPools/kubernetes".into(),
            ],
        }],
        etag: "W/\"1\"".into(),
    };
    let got = read(&nic.render("S", "MC_rg")).expect("readable");
    assert_eq!(got.id, nic.id("S", "MC_rg"));
    assert_eq!(got.vm, vm("mc_rg", "aks-flex-12345678-vm1"));
    nic.virtual_machine_id = None;
    assert_eq!(read(&nic.render("S", "MC_rg")).expect("readable").vm, None);
}

/// Fields cutover does not read, each of another type than the schema says: every one of these
/// NICs was refused whole by azure_mgmt_network 0.21's `NetworkInterface` model (checked before
/// it was removed: "invalid type: string \"true\", expected a boolean", "invalid type: map,
/// expected a sequence", ...), and the NIC dropped without a word. Each, and all together, still
/// map to the VM: only `id` and `properties.virtualMachine.id` are read.
#[test]
fn other_fields_of_another_type_change_nothing() {
    let changes: [fn(&mut Value); 5] = [
        |n| n["properties"]["enableAcceleratedNetworking"] = json!("true"),
        |n| n["properties"]["ipConfigurations"][0]["properties"]["primary"] = json!("yes"),
        |n| n["properties"]["ipConfigurations"] = json!({"unexpected": "shape"}),
        |n| n["properties"]["dnsSettings"]["dnsServers"] = json!("168.63.129.16"),
        |n| n["location"] = json!(7),
    ];
    let mut all = example_nics()[0].clone();
    for change in changes {
        let mut one = example_nics()[0].clone();
        change(&mut one);
        assert_eq!(read(&one).expect("readable").vm, vm("rg1", "vm1"), "{one}");
        change(&mut all);
    }
    all["properties"]["someFieldOfANewerApiVersion"] = json!({"x": [1, 2]});
    assert_eq!(read(&all).expect("readable").vm, vm("rg1", "vm1"), "{all}");
}

#[test]
fn absent_and_null_fields_are_absent() {
    let id = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/n";
    for raw in [
        json!({"id": id}),
        json!({"id": id, "properties": null}),
        json!({"id": id, "properties": {}}),
        json!({"id": id, "properties": {"virtualMachine": null}}),
    ] {
        assert_eq!(
            read(&raw),
            Ok(Nic {
                id: id.into(),
                vm: None
            }),
            "{raw}"
        );
    }
}

/// A NIC whose own fields cannot be read is reported with its ID (or name) and the reason.
#[test]
fn a_nic_unreadable_in_the_fields_read_is_reported() {
    let id = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/n";
    let cases = [
        (
            json!({"id": id, "properties": {"virtualMachine": {"id": 42}}}),
            id,
            "`properties.virtualMachine.id`: invalid type: integer `42`, expected a string",
        ),
        (
            json!({"id": id, "properties": {"virtualMachine": "vm1"}}),
            id,
            "invalid type: string \"vm1\", expected `properties.virtualMachine` as an object",
        ),
        (
            json!({"id": id, "properties": "Succeeded"}),
            id,
            "invalid type: string \"Succeeded\", expected `properties` as an object",
        ),
        (
            json!({"id": id, "properties": {"virtualMachine": {}}}),
            id,
            "`properties.virtualMachine` has no `id`",
        ),
        (
            json!({"id": id, "properties": {"virtualMachine": {"id": "vm1"}}}),
            id,
            "`properties.virtualMachine.id` is not a virtual machine ID: vm1",
        ),
        (
            json!({"id": 7, "name": "n"}),
            "(no id; name n)",
            "`id`: invalid type: integer `7`, expected a string",
        ),
        (json!({"name": "n"}), "(no id; name n)", "no `id`"),
        (
            json!({"id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm1"}),
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm1",
            "`id` is not a network interface ID",
        ),
        (
            json!("a string"),
            "(no id)",
            "invalid type: string \"a string\", expected a network interface object",
        ),
    ];
    for (raw, nic, reason) in cases {
        assert_eq!(
            read(&raw),
            Err(Unreadable {
                nic: nic.into(),
                reason: reason.into()
            }),
            "{raw}"
        );
    }
}

/// Through the NIC map: a readable NIC maps, a detached one is skipped, an unreadable one is
/// kept for the caller to report, and the entry on the lenient NIC resolves to its node.
#[test]
fn the_nic_map_keeps_what_it_could_not_read() {
    use super::super::index::{LbPools, NodeSpec, PoolIndex, nic_map};
    let mut lenient = example_nics()[0].clone();
    lenient["properties"]["enableAcceleratedNetworking"] = json!("true");
    let broken = json!({"id": "/subscriptions/subid/resourceGroups/rg1/providers/Microsoft.Network/networkInterfaces/broken",
        "properties": {"virtualMachine": {"id": ["not", "a", "string"]}}});
    let map = nic_map(&[lenient, example_nics()[1].clone(), broken]);
    assert_eq!(map.len(), 1);
    assert_eq!(
        map.unreadable(),
        [Unreadable {
            nic: "/subscriptions/subid/resourceGroups/rg1/providers/Microsoft.Network/networkInterfaces/broken".into(),
            reason: "`properties.virtualMachine.id`: invalid type: sequence, expected a string".into(),
        }]
    );
    let lbs = [LbPools {
        name: "kubernetes".into(),
        id: "lb".into(),
        pools: vec![json!({"name": "kubernetes", "properties": {
            "loadBalancingRules": [{"id": "r"}],
            "loadBalancerBackendAddresses": [{"name": "rg1_test-nicipconfig1", "properties": {
                "networkInterfaceIPConfiguration": {"id": "/subscriptions/subid/resourceGroups/rg1/providers/Microsoft.Network/networkInterfaces/test-nic/ipConfigurations/ipconfig1"}}}]}})],
    }];
    let idx = PoolIndex::build(&lbs, map);
    let node = NodeSpec {
        name: "vm1".into(),
        provider_id: "azure:///subscriptions/subid/resourceGroups/rg1/providers/Microsoft.Compute/virtualMachines/vm1".into(),
        ..Default::default()
    };
    let r = idx.resolve(&node, None);
    assert_eq!(r.entries.len(), 1, "{:?}", r.notes);
    assert_eq!(&*r.entries[0].entry, "rg1_test-nicipconfig1");
}
