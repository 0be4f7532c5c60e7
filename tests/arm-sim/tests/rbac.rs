//! Azure RBAC in the simulator over real HTTP: role assignments per principal and scope, the
//! shipped custom roles (`deploy/azure/*.json`) against exactly what the simulator requires for
//! the calls actuator-svc makes, linked access on LB and pool PUTs, the permissions API, the
//! node resource group lockdown (azure-production.md sections 1, 2, 6).
#![allow(clippy::unwrap_used)] // tests may unwrap (helpers outside #[test] fns too)

mod common;

use arm_sim::rbac::{Rbac, RoleAssignment, RoleDefinition};
use arm_sim::seed::Seed;
use arm_sim::{ArmSim, ArmSimOptions};
use common::{Raw, Reply};
use serde_json::{Value, json};

const SUB: &str = "5a2e4b2c-1f7d-4c4e-9a55-0b0c8d7e6f31";
const MC: &str = "MC_cutover-rg_cutover_eastus";

fn rg_id(rg: &str) -> String {
    format!("/subscriptions/{SUB}/resourceGroups/{rg}")
}

fn net_id(rg: &str, rest: &str) -> String {
    format!("{}/providers/Microsoft.Network/{rest}", rg_id(rg))
}

fn lb_id(lb: &str) -> String {
    net_id(MC, &format!("loadBalancers/{lb}"))
}

fn role_file(name: &str) -> RoleDefinition {
    let path = format!("{}/../../deploy/azure/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let role: RoleDefinition = serde_json::from_str(&text).unwrap();
    role.validate().unwrap();
    role
}

fn writer() -> RoleDefinition {
    role_file("role-lb-writer.json")
}

fn joiner() -> RoleDefinition {
    role_file("role-network-joiner.json")
}

async fn start_seed(seed: Seed) -> ArmSim {
    let mut options = ArmSimOptions {
        seed,
        ..Default::default()
    };
    // Operations end as soon as they start: these tests are about who may call, not timing.
    options.tuning.completion_delay_ms = 0;
    ArmSim::start(options).await.unwrap()
}

async fn start_fixture(name: &str) -> ArmSim {
    start_seed(Seed::preset(name, None).unwrap()).await
}

/// Assigns `roles` (name, scope) to the simulator's service principal (by client id), with the
/// shipped role definitions known.
fn assign(sim: &ArmSim, roles: &[(&RoleDefinition, &str)]) {
    let principal = sim.credentials().client_id;
    let mut defs: Vec<RoleDefinition> = Vec::new();
    for (r, _) in roles {
        if r.is_custom && !defs.iter().any(|d| d.name == r.name) {
            defs.push((*r).clone());
        }
    }
    sim.set_rbac(Rbac {
        role_definitions: defs,
        role_assignments: roles
            .iter()
            .map(|(r, scope)| RoleAssignment {
                principal_id: principal.clone(),
                role: r.name.clone(),
                scope: (*scope).to_owned(),
            })
            .collect(),
        ..Rbac::default()
    })
    .unwrap();
}

fn without(role: &RoleDefinition, action: &str) -> RoleDefinition {
    let mut r = role.clone();
    r.actions.retain(|a| a != action);
    r
}

/// A refused call: which of the actuator's calls, and ARM's answer.
#[derive(Debug)]
struct Refused {
    call: &'static str,
    status: u16,
    code: String,
    message: String,
}

fn refused(call: &'static str, r: &Reply) -> Refused {
    Refused {
        call,
        status: r.status,
        code: r.code().to_owned(),
        message: r.body["error"]["message"].as_str().unwrap_or("").to_owned(),
    }
}

/// Polls an operation until it ends, as the actuator's tracker does; a refusal ends it.
async fn track(raw: &Raw, tok: &str, op: &str) -> Result<(), Refused> {
    loop {
        let poll = raw.get(op, tok).await;
        if poll.status != 200 {
            return Err(refused("poll operation", &poll));
        }
        if poll.body["status"] != "InProgress" {
            assert_eq!(poll.body["status"], "Succeeded", "{:?}", poll.body);
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The calls actuator-svc makes against one load balancer, in its order, as raw HTTP
/// (`actuator-svc/src/arm/client.rs`: `get_lb_body`/`get_lb_state` GET the LB, `put_lb` PUTs
/// it whole with `If-Match`, `poll` GETs the `Azure-AsyncOperation` URL, `put_pool` PUTs one
/// pool with `If-Match` under `--write-strategy per-pool`, `list_nics` lists the node resource
/// group's NICs), plus the permissions API at every scope involved, which the read-only
/// preflight of issue 27 item 3 is to read (the LB's group and each linked resource).
async fn actuator_calls(
    raw: &Raw,
    tok: &str,
    lb: &str,
    pool: &str,
    linked: &[String],
) -> Result<(), Refused> {
    let lb_path = lb_id(lb);
    let got = raw.get(&lb_path, tok).await;
    if got.status != 200 {
        return Err(refused("GET LB", &got));
    }
    let mut body = got.body.clone();
    let etag = body["etag"].as_str().unwrap().to_owned();
    let pools = body["properties"]["backendAddressPools"]
        .as_array_mut()
        .unwrap();
    let p = pools
        .iter_mut()
        .find(|p| p["name"].as_str().unwrap().eq_ignore_ascii_case(pool))
        .unwrap();
    p["properties"]["loadBalancerBackendAddresses"][0]["properties"]["adminState"] = json!("Down");
    let put = raw.put(&lb_path, tok, &body, Some(&etag)).await;
    if put.status != 200 {
        return Err(refused("PUT LB", &put));
    }
    let op = put.header("azure-asyncoperation").unwrap().to_owned();
    track(raw, tok, &op).await?;

    let got = raw.get(&lb_path, tok).await;
    assert_eq!(got.status, 200);
    let etag = got.body["etag"].as_str().unwrap().to_owned();
    let mut pool_body = got.body["properties"]["backendAddressPools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str().unwrap().eq_ignore_ascii_case(pool))
        .unwrap()
        .clone();
    pool_body["properties"]["loadBalancerBackendAddresses"][0]["properties"]["adminState"] =
        json!("None");
    let pool_path = format!("{lb_path}/backendAddressPools/{pool}");
    let put = raw.put(&pool_path, tok, &pool_body, Some(&etag)).await;
    if put.status != 200 {
        return Err(refused("PUT pool", &put));
    }
    let op = put.header("azure-asyncoperation").unwrap().to_owned();
    track(raw, tok, &op).await?;

    let nics = raw.get(&net_id(MC, "networkInterfaces"), tok).await;
    if nics.status != 200 {
        return Err(refused("LIST NICs", &nics));
    }
    for scope in std::iter::once(&rg_id(MC)).chain(linked) {
        let perms = raw
            .get(
                &format!(
                    "{scope}/providers/Microsoft.Authorization/permissions?api-version=2022-04-01"
                ),
                tok,
            )
            .await;
        if perms.status != 200 {
            return Err(refused("permissions API", &perms));
        }
    }
    Ok(())
}

/// Every reference kind in the load balancers' own resource group: public IP, prefix and NAT
/// rule on the public LB, an IP-based pool with its VNet and an entry naming a subnet, a
/// frontend subnet on the internal LB.
fn same_group_seed() -> Seed {
    let pip = net_id(MC, "publicIPAddresses/pip-1");
    let prefix = net_id(MC, "publicIPPrefixes/prefix-1");
    let vnet = net_id(MC, "virtualNetworks/aks-vnet");
    let subnet = format!("{vnet}/subnets/aks-subnet");
    seed_with(&pip, &prefix, &vnet, &subnet)
}

/// The same load balancers, every referenced resource in another group: the VNet in
/// `customer-net-rg`, public IP and prefix in `customer-ip-rg`.
fn linked_seed() -> (Seed, Vec<String>) {
    let pip = net_id("customer-ip-rg", "publicIPAddresses/egress-ip");
    let prefix = net_id("customer-ip-rg", "publicIPPrefixes/egress-prefix");
    let vnet = net_id("customer-net-rg", "virtualNetworks/customer-vnet");
    let subnet = format!("{vnet}/subnets/aks-subnet");
    (
        seed_with(&pip, &prefix, &vnet, &subnet),
        vec![pip, prefix, vnet, subnet],
    )
}

fn seed_with(pip: &str, prefix: &str, vnet: &str, subnet: &str) -> Seed {
    let vmss_ipc = |i: u32| {
        format!(
            "{}/providers/Microsoft.Compute/virtualMachineScaleSets/np-vmss/virtualMachines/{i}/networkInterfaces/np-vmss/ipConfigurations/ipconfig1",
            rg_id(MC)
        )
    };
    let text = format!(
        r#"
subscriptions:
  - id: {SUB}
    resourceGroups:
      - name: customer-net-rg
      - name: customer-ip-rg
      - name: {MC}
        virtualMachineScaleSets:
          - name: np-vmss
            instances:
              - {{instanceId: 0, computerName: np-vmss000000, nicName: np-vmss, ipConfigurations: [{{name: ipconfig1, privateIpAddress: 10.10.0.4, primary: true}}]}}
        networkInterfaces:
          - name: vm-1-nic
            ipConfigurations: [{{name: ipconfig1, privateIpAddress: 10.10.0.9, primary: true}}]
        loadBalancers:
          - name: kubernetes
            properties:
              frontendIPConfigurations:
                - {{name: svc, properties: {{publicIPAddress: {{id: {pip}}}}}}}
                - {{name: egress, properties: {{publicIPPrefix: {{id: {prefix}}}}}}}
              inboundNatRules:
                - {{name: ssh, properties: {{frontendIPConfiguration: {{id: {lb}/frontendIPConfigurations/svc}}, protocol: Tcp, frontendPort: 2222, backendPort: 22}}}}
            backendPools:
              - name: kubernetes
                virtualNetwork: {vnet}
                addresses:
                  - {{name: np-vmss000000, ipAddress: 10.10.0.4}}
                  - {{name: vm-1, ipAddress: 10.10.0.9, subnet: {subnet}}}
          - name: kubernetes-internal
            properties:
              frontendIPConfigurations:
                - {{name: ilb, properties: {{privateIPAddress: 10.10.0.100, privateIPAllocationMethod: Static, subnet: {{id: {subnet}}}}}}}
            backendPools:
              - name: kubernetes
                nicIpConfigurations: [{ipc}]
"#,
        lb = lb_id("kubernetes"),
        ipc = vmss_ipc(0),
    );
    Seed::parse("inline", &text).unwrap()
}

async fn both_lbs(sim: &ArmSim, linked: &[String]) -> Result<(), Refused> {
    let raw = Raw::new(sim);
    let tok = raw.token(sim).await;
    actuator_calls(&raw, &tok, "kubernetes", "kubernetes", linked).await?;
    actuator_calls(&raw, &tok, "kubernetes-internal", "kubernetes", linked).await
}

/// The quoted action names in an ARM 403 message's refused part.
fn names_action(r: &Refused, action: &str) -> bool {
    r.status == 403
        && r.message
            .to_ascii_lowercase()
            .contains(&action.to_ascii_lowercase())
}

#[tokio::test]
async fn the_writer_role_is_exactly_what_the_actuator_calls_need_in_its_own_group() {
    let writer = writer();
    let mc = rg_id(MC);
    let sim = start_seed(same_group_seed()).await;
    assign(&sim, &[(&writer, &mc)]);
    both_lbs(&sim, &[]).await.unwrap();
    drop(sim);
    // Every action is needed: without it one of the calls is refused, naming it.
    for action in &writer.actions {
        let sim = start_seed(same_group_seed()).await;
        let less = without(&writer, action);
        assign(&sim, &[(&less, &mc)]);
        let r = both_lbs(&sim, &[])
            .await
            .expect_err(&format!("nothing needed {action}"));
        assert!(
            names_action(&r, action),
            "without {action}: {r:?} (a call refused for another reason)"
        );
        assert!(
            ["AuthorizationFailed", "LinkedAuthorizationFailed"].contains(&r.code.as_str()),
            "{r:?}"
        );
    }
}

#[tokio::test]
async fn the_joiner_role_on_each_linked_resource_is_exactly_what_linked_access_needs() {
    let (writer, joiner) = (writer(), joiner());
    let mc = rg_id(MC);
    let (seed, linked) = linked_seed();
    // Joiner on the public IP, the prefix and the VNet (which covers its subnet).
    let scopes = [linked[0].clone(), linked[1].clone(), linked[2].clone()];
    let grants = |j: &RoleDefinition| -> Vec<(RoleDefinition, String)> {
        let mut v = vec![(writer.clone(), mc.clone())];
        v.extend(scopes.iter().map(|s| (j.clone(), s.clone())));
        v
    };
    let sim = start_seed(seed.clone()).await;
    let g = grants(&joiner);
    assign(
        &sim,
        &g.iter().map(|(r, s)| (r, s.as_str())).collect::<Vec<_>>(),
    );
    both_lbs(&sim, &linked).await.unwrap();
    drop(sim);

    // The writer role alone on the LB's group: the linked references are refused.
    let sim = start_seed(seed.clone()).await;
    assign(&sim, &[(&writer, &mc)]);
    let r = both_lbs(&sim, &linked).await.unwrap_err();
    assert_eq!(
        (r.call, r.code.as_str()),
        ("PUT LB", "LinkedAuthorizationFailed"),
        "{r:?}"
    );
    drop(sim);

    for action in &joiner.actions {
        let sim = start_seed(seed.clone()).await;
        let less = without(&joiner, action);
        let g = grants(&less);
        assign(
            &sim,
            &g.iter().map(|(r, s)| (r, s.as_str())).collect::<Vec<_>>(),
        );
        let r = both_lbs(&sim, &linked)
            .await
            .expect_err(&format!("nothing needed {action}"));
        assert!(names_action(&r, action), "without {action}: {r:?}");
    }
}

#[tokio::test]
async fn the_role_files_are_the_sims_required_actions_and_nothing_broader() {
    let (writer, joiner) = (writer(), joiner());
    for r in [&writer, &joiner] {
        assert!(r.is_custom);
        assert!(r.not_actions.is_empty() && r.data_actions.is_empty());
        for a in &r.actions {
            assert!(!a.contains('*'), "{}: no wildcard ({a})", r.name);
            assert!(
                !a.to_ascii_lowercase().ends_with("/delete"),
                "{}: nothing deletes ({a})",
                r.name
            );
        }
        assert_eq!(
            r.assignable_scopes,
            vec!["/subscriptions/<SUBSCRIPTION_ID>"]
        );
    }
    // The joiner is the writer's joins plus the self-check, nothing of its own.
    for a in &joiner.actions {
        assert!(writer.actions.contains(a), "{a}");
    }
    let linked = [
        arm_sim::rbac::JOIN_PUBLIC_IP,
        arm_sim::rbac::JOIN_PUBLIC_IP_PREFIX,
        arm_sim::rbac::JOIN_SUBNET,
        arm_sim::rbac::JOIN_VNET_LB,
        arm_sim::rbac::JOIN_SUBNET_LB,
        arm_sim::rbac::PERMISSIONS_READ,
    ];
    let mut j = joiner.actions.clone();
    j.sort();
    let mut l: Vec<String> = linked.iter().map(|s| (*s).to_owned()).collect();
    l.sort();
    assert_eq!(j, l);
    // Nothing that Network Contributor adds beyond cutover's calls.
    let nc = Rbac::default().role("Network Contributor").unwrap();
    for a in [
        "Microsoft.Network/loadBalancers/delete",
        "Microsoft.Network/networkSecurityGroups/write",
        "Microsoft.Network/routeTables/write",
        "Microsoft.Network/virtualNetworks/write",
        "Microsoft.Network/loadBalancers/backendAddressPools/delete",
    ] {
        assert!(nc.grants(a), "{a}");
        assert!(!writer.grants(a) && !joiner.grants(a), "{a}");
    }
}

#[tokio::test]
async fn byo_vnet_internal_lb_needs_the_subnet_join_and_nothing_changes_on_refusal() {
    let sim = start_fixture("byo-vnet").await;
    let writer = writer();
    let mc = rg_id(MC);
    assign(&sim, &[(&writer, &mc)]);
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let path = lb_id("kubernetes-internal");
    let got = raw.get(&path, &tok).await;
    assert_eq!(got.status, 200);
    let etag = got.body["etag"].as_str().unwrap().to_owned();
    let mut body = got.body.clone();
    body["properties"]["backendAddressPools"][0]["properties"]["loadBalancerBackendAddresses"][0]
        ["properties"]["adminState"] = json!("Down");
    let put = raw.put(&path, &tok, &body, Some(&etag)).await;
    let subnet = net_id(
        "customer-net-rg",
        "virtualNetworks/customer-vnet/subnets/aks-subnet",
    );
    assert_eq!((put.status, put.code()), (403, "LinkedAuthorizationFailed"));
    assert!(put.header("azure-asyncoperation").is_none());
    let c = sim.credentials();
    assert_eq!(
        put.body["error"]["message"].as_str().unwrap(),
        format!(
            "The client '{}' with object id '{}' has permission to perform action 'Microsoft.Network/loadBalancers/write' on scope '{path}'; however, it does not have permission to perform action(s) 'Microsoft.Network/virtualNetworks/subnets/join/action' on the linked scope(s) '{subnet}' (respectively) or the linked scope(s) are invalid.",
            c.client_id,
            sim.object_id()
        )
    );
    // Refused before anything changed: same etag, no operation, no admin state.
    assert_eq!(raw.get(&path, &tok).await.body["etag"], json!(etag));
    assert!(sim.operation_records().is_empty());
    assert!(sim.effective_log().is_empty());

    // A pool PUT is refused too (pessimistic: it re-checks the frontends) ...
    let pool_path = format!("{path}/backendAddressPools/kubernetes");
    let pool = got.body["properties"]["backendAddressPools"][0].clone();
    let put = raw.put(&pool_path, &tok, &pool, Some(&etag)).await;
    assert_eq!((put.status, put.code()), (403, "LinkedAuthorizationFailed"));
    assert!(
        put.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("'Microsoft.Network/loadBalancers/backendAddressPools/write' on scope"),
        "{:?}",
        put.body
    );
    // ... unless the optimistic reading is chosen.
    let mut rbac = sim.rbac();
    rbac.pool_put_checks_frontends = false;
    sim.set_rbac(rbac).unwrap();
    let put = raw.put(&pool_path, &tok, &pool, Some(&etag)).await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    track(&raw, &tok, put.header("azure-asyncoperation").unwrap())
        .await
        .unwrap();

    // The joiner on the subnet: the whole-LB PUT passes.
    let joiner = joiner();
    assign(&sim, &[(&writer, &mc), (&joiner, &subnet)]);
    let raw = Raw::new(&sim);
    actuator_calls(&raw, &tok, "kubernetes-internal", "kubernetes", &[subnet])
        .await
        .unwrap();
}

#[tokio::test]
async fn foreign_public_ip_and_prefix_are_named_together_in_one_refusal() {
    let sim = start_fixture("foreign-public-ip").await;
    let (writer, joiner) = (writer(), joiner());
    let mc = rg_id(MC);
    assign(&sim, &[(&writer, &mc)]);
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let r = actuator_calls(&raw, &tok, "kubernetes", "kubernetes", &[])
        .await
        .unwrap_err();
    let pip = net_id("customer-ip-rg", "publicIPAddresses/egress-ip");
    let prefix = net_id("customer-ip-rg", "publicIPPrefixes/egress-prefix");
    assert_eq!(
        (r.call, r.code.as_str()),
        ("PUT LB", "LinkedAuthorizationFailed")
    );
    assert!(
        r.message.contains(&format!(
            "perform action(s) 'Microsoft.Network/publicIPAddresses/join/action,Microsoft.Network/publicIPPrefixes/join/action' on the linked scope(s) '{pip},{prefix}' (respectively)"
        )),
        "{}",
        r.message
    );
    // The service frontend's public IP is in the node group: the writer role covers it.
    assert!(
        !r.message.contains("publicIPAddresses/kubernetes-"),
        "{}",
        r.message
    );

    // Network Contributor on the node group does not help either.
    let nc = Rbac::default().role("Network Contributor").unwrap();
    assign(&sim, &[(&nc, &mc)]);
    let r = actuator_calls(&raw, &tok, "kubernetes", "kubernetes", &[])
        .await
        .unwrap_err();
    assert_eq!(r.code, "LinkedAuthorizationFailed");

    // The joiner on the group holding both.
    let ip_rg = rg_id("customer-ip-rg");
    assign(&sim, &[(&writer, &mc), (&joiner, &ip_rg)]);
    actuator_calls(&raw, &tok, "kubernetes", "kubernetes", &[pip, prefix])
        .await
        .unwrap();
}

#[tokio::test]
async fn ip_based_pool_on_a_foreign_vnet_needs_join_load_balancer_on_lb_and_pool_puts() {
    let sim = start_fixture("ip-pool-vnet").await;
    let (writer, joiner) = (writer(), joiner());
    let mc = rg_id(MC);
    let vnet = net_id("customer-net-rg", "virtualNetworks/customer-vnet");
    assign(&sim, &[(&writer, &mc)]);
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let path = lb_id("kubernetes");
    let got = raw.get(&path, &tok).await;
    let etag = got.body["etag"].as_str().unwrap().to_owned();
    let put = raw.put(&path, &tok, &got.body, Some(&etag)).await;
    assert_eq!((put.status, put.code()), (403, "LinkedAuthorizationFailed"));
    let msg = put.body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!(
            "'Microsoft.Network/virtualNetworks/joinLoadBalancer/action' on the linked scope(s) '{vnet}'"
        )),
        "{msg}"
    );
    let pool = got.body["properties"]["backendAddressPools"][0].clone();
    let put = raw
        .put(
            &format!("{path}/backendAddressPools/kubernetes"),
            &tok,
            &pool,
            Some(&etag),
        )
        .await;
    assert_eq!((put.status, put.code()), (403, "LinkedAuthorizationFailed"));
    assert!(
        put.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&vnet)
    );

    assign(&sim, &[(&writer, &mc), (&joiner, &vnet)]);
    actuator_calls(&raw, &tok, "kubernetes", "kubernetes", &[vnet])
        .await
        .unwrap();
}

#[tokio::test]
async fn calls_without_a_role_get_authorization_failed_and_object_ids_count() {
    let sim = start_fixture("byo-vnet").await;
    let writer = writer();
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    // Someone else holds the role: enforcing, and this principal has nothing.
    sim.set_rbac(Rbac {
        role_definitions: vec![writer.clone()],
        role_assignments: vec![RoleAssignment {
            principal_id: "someone-else".into(),
            role: writer.name.clone(),
            scope: rg_id(MC),
        }],
        ..Rbac::default()
    })
    .unwrap();
    let path = lb_id("kubernetes-internal");
    let got = raw.get(&path, &tok).await;
    assert_eq!((got.status, got.code()), (403, "AuthorizationFailed"));
    assert_eq!(
        got.body["error"]["message"].as_str().unwrap(),
        format!(
            "The client '{}' with object id '{}' does not have authorization to perform action 'Microsoft.Network/loadBalancers/read' over scope '{path}' or the scope is invalid. If access was recently granted, please refresh your credentials.",
            sim.credentials().client_id,
            sim.object_id()
        )
    );
    // Assigned to the object id, it works.
    sim.set_rbac(Rbac {
        role_definitions: vec![writer.clone()],
        role_assignments: vec![RoleAssignment {
            principal_id: sim.object_id().to_owned(),
            role: writer.name.clone(),
            scope: rg_id(MC),
        }],
        ..Rbac::default()
    })
    .unwrap();
    assert_eq!(raw.get(&path, &tok).await.status, 200);
}

#[tokio::test]
async fn a_grant_on_the_load_balancer_alone_cannot_track_its_operations() {
    let sim = start_fixture("ip-pool-vnet").await;
    let (writer, joiner) = (writer(), joiner());
    let path = lb_id("kubernetes");
    let vnet = net_id("customer-net-rg", "virtualNetworks/customer-vnet");
    assign(&sim, &[(&writer, &path), (&joiner, &vnet)]);
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let got = raw.get(&path, &tok).await;
    assert_eq!(got.status, 200);
    let etag = got.body["etag"].as_str().unwrap().to_owned();
    // The public IP of the service frontend is in the node group, outside the LB: its join is
    // not covered by a grant on the LB alone (azure-production.md 6 [O: AZ104]).
    let put = raw.put(&path, &tok, &got.body, Some(&etag)).await;
    assert_eq!((put.status, put.code()), (403, "LinkedAuthorizationFailed"));
    let pip = net_id(
        MC,
        "publicIPAddresses/kubernetes-a1b2c3d4e5f60718293a4b5c6d7e8f90",
    );
    assign(&sim, &[(&writer, &path), (&joiner, &vnet), (&joiner, &pip)]);
    let put = raw.put(&path, &tok, &got.body, Some(&etag)).await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    let op = put.header("azure-asyncoperation").unwrap();
    let poll = raw.get(op, &tok).await;
    assert_eq!((poll.status, poll.code()), (403, "AuthorizationFailed"));
    assert!(
        poll.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!(
                "'Microsoft.Network/locations/operations/read' over scope '{}'",
                rg_id(MC)
            )),
        "{:?}",
        poll.body
    );
}

#[tokio::test]
async fn the_permissions_api_answers_the_callers_roles_at_a_scope() {
    let sim = start_fixture("byo-vnet").await;
    let (writer, joiner) = (writer(), joiner());
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let perms = |scope: String, v: &'static str| {
        let raw = raw.clone();
        let tok = tok.clone();
        async move {
            raw.get(
                &format!("{scope}/providers/Microsoft.Authorization/permissions?api-version={v}"),
                &tok,
            )
            .await
        }
    };
    // Permissive default: everything.
    let r = perms(rg_id(MC), "2022-04-01").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body,
        json!({"value": [{"actions": ["*"], "notActions": [], "dataActions": [], "notDataActions": []}]})
    );

    let subnet = net_id(
        "customer-net-rg",
        "virtualNetworks/customer-vnet/subnets/aks-subnet",
    );
    let vnet = net_id("customer-net-rg", "virtualNetworks/customer-vnet");
    assign(&sim, &[(&writer, &rg_id(MC)), (&joiner, &vnet)]);
    // At the LB (below the group): the writer's entry, inherited.
    let r = perms(lb_id("kubernetes-internal"), "2015-07-01").await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let value = r.body["value"].as_array().unwrap();
    assert_eq!(value.len(), 1);
    assert_eq!(value[0]["actions"], json!(writer.actions));
    assert_eq!(value[0]["notActions"], json!([]));
    // At the subnet: the joiner's, from the VNet.
    let r = perms(subnet.clone(), "2022-04-01").await;
    assert_eq!(r.body["value"][0]["actions"], json!(joiner.actions));
    // A scope where the caller holds nothing: 403 (it lacks permissions/read there).
    let r = perms(rg_id("customer-net-rg"), "2022-04-01").await;
    assert_eq!((r.status, r.code()), (403, "AuthorizationFailed"));
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Microsoft.Authorization/permissions/read")
    );
    // Unknown api-version: ARM's 400.
    let r = perms(rg_id(MC), "2024-03-01").await;
    assert_eq!((r.status, r.code()), (400, "NoRegisteredProviderFound"));
}

#[tokio::test]
async fn node_resource_group_lockdown_refuses_writes_except_to_exempt_principals() {
    let sim = start_fixture("ip-pool-vnet").await;
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    // Permissive roles; the lockdown set through the control endpoint.
    let deny = raw
        .send(
            "POST",
            "/_sim/rbac/lockdown",
            &[("content-type", "application/json")],
            Some(
                serde_json::to_vec(&json!({"resourceGroup": MC, "exemptPrincipals": ["aks-rp"]}))
                    .unwrap(),
            ),
        )
        .await;
    assert_eq!(deny.status, 200, "{:?}", deny.body);
    let path = lb_id("kubernetes");
    let got = raw.get(&path, &tok).await;
    assert_eq!(got.status, 200, "reads stay allowed");
    let etag = got.body["etag"].as_str().unwrap().to_owned();
    let put = raw.put(&path, &tok, &got.body, Some(&etag)).await;
    assert_eq!(
        (put.status, put.code()),
        (403, "DenyAssignmentAuthorizationFailed")
    );
    let name = deny.body["name"].as_str().unwrap();
    assert!(name.ends_with(": node resource group deny assignment created by Azure Kubernetes Services for nrg-lockdown, see: https://aka.ms/aks/nrg_lockdown"), "{name}");
    assert_eq!(
        put.body["error"]["message"].as_str().unwrap(),
        format!(
            "The client '{}' with object id '{}' has permission to perform action 'Microsoft.Network/loadBalancers/write' on scope '{path}'; however, the access is denied because of the deny assignment with name '{name}' and Id '{}' at scope '/subscriptions/{SUB}/resourcegroups/{MC}'.",
            sim.credentials().client_id,
            sim.object_id(),
            deny.body["id"].as_str().unwrap()
        )
    );
    let pool = got.body["properties"]["backendAddressPools"][0].clone();
    let put = raw
        .put(
            &format!("{path}/backendAddressPools/kubernetes"),
            &tok,
            &pool,
            Some(&etag),
        )
        .await;
    assert_eq!(put.code(), "DenyAssignmentAuthorizationFailed");
    assert!(sim.operation_records().is_empty());
    // The permissions API does not show deny assignments: it still says "*".
    let r = raw
        .get(
            &format!(
                "{}/providers/Microsoft.Authorization/permissions?api-version=2022-04-01",
                rg_id(MC)
            ),
            &tok,
        )
        .await;
    assert_eq!(r.body["value"][0]["actions"], json!(["*"]));
    // An exempt principal writes.
    let mut rbac = sim.rbac();
    rbac.deny_assignments[0]
        .exclude_principals
        .push(sim.object_id().to_owned());
    sim.set_rbac(rbac).unwrap();
    let put = raw.put(&path, &tok, &got.body, Some(&etag)).await;
    assert_eq!(put.status, 200, "{:?}", put.body);
}

#[tokio::test]
async fn the_control_endpoint_round_trips_and_refuses_unknown_actions() {
    let sim = start_fixture("byo-vnet").await;
    let raw = Raw::new(&sim);
    let mut bad = writer();
    bad.actions
        .push("Microsoft.Network/loadBalancers/backendAddressPools/wirte".into());
    let body = json!({
        "roleDefinitions": [bad],
        "roleAssignments": [{"principalId": "p", "role": "Cutover Load Balancer Writer", "scope": rg_id(MC)}],
    });
    let r = raw
        .send(
            "PUT",
            "/_sim/rbac",
            &[("content-type", "application/json")],
            Some(serde_json::to_vec(&body).unwrap()),
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("does not match any of the actions")
    );
    let body = json!({
        "roleDefinitions": [writer()],
        "roleAssignments": [{"principalId": "p", "role": "Cutover Load Balancer Writer", "scope": rg_id(MC)}],
    });
    let r = raw
        .send(
            "PUT",
            "/_sim/rbac",
            &[("content-type", "application/json")],
            Some(serde_json::to_vec(&body).unwrap()),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(
        r.body["poolPutChecksFrontends"],
        json!(true),
        "pessimistic default"
    );
    let got = raw.send("GET", "/_sim/rbac", &[], None).await;
    assert_eq!(got.body["roleAssignments"][0]["principalId"], "p");
    assert!(sim.rbac().enforcing());
}

#[tokio::test]
async fn a_seed_carries_role_assignments() {
    let mut seed = Seed::preset("byo-vnet", None).unwrap();
    let text = format!(
        r#"{{"roleDefinitions": [], "roleAssignments": [{{"principalId": "nobody", "role": "Reader", "scope": "/subscriptions/{SUB}"}}]}}"#
    );
    seed.rbac = Some(serde_json::from_str::<Rbac>(&text).unwrap());
    let sim = start_seed(seed).await;
    let raw = Raw::new(&sim);
    let tok = raw.token(&sim).await;
    let r = raw.get(&lb_id("kubernetes-internal"), &tok).await;
    assert_eq!((r.status, r.code()), (403, "AuthorizationFailed"));
    let v: Value = serde_json::to_value(sim.rbac()).unwrap();
    assert_eq!(v["roleAssignments"][0]["role"], "Reader");
}

#[tokio::test]
async fn without_role_assignments_everything_is_granted() {
    // The default every other test relies on: no assignment configured, no refusal, linked
    // references included.
    for fixture in ["byo-vnet", "foreign-public-ip", "ip-pool-vnet"] {
        let sim = start_fixture(fixture).await;
        assert!(!sim.rbac().enforcing());
        let raw = Raw::new(&sim);
        let tok = raw.token(&sim).await;
        let lb = if fixture == "byo-vnet" {
            "kubernetes-internal"
        } else {
            "kubernetes"
        };
        actuator_calls(&raw, &tok, lb, "kubernetes", &[rg_id("customer-net-rg")])
            .await
            .unwrap();
    }
}
