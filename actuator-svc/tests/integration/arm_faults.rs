//! The ARM client under resource-provider faults (issue 26 N8) and its traceability and token
//! hygiene (issue 27 items 6 and 7), against arm-sim in process.

use crate::common::*;
use actuator_svc::arm::budget::{Budget, DEFAULT_READ, DEFAULT_WRITE};
use actuator_svc::arm::client::Scope;
use actuator_svc::arm::transport::Transport;
use actuator_svc::arm::{ArmClient, ArmError};
use actuator_svc::config::azure_json::CredentialChoice;
use actuator_svc::credentials::{self, Sources};
use actuator_svc::metrics::Metrics;
use arm_sim::ArmSim;
use arm_sim::faults::{FaultSpec, NotProvisioned};
use cutover_proto::v1::actuator_client::ActuatorClient;
use cutover_proto::v1::*;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tonic::transport::Channel;

const USER_AGENT: &str = concat!("cutover/", env!("CARGO_PKG_VERSION"), " (actuator-svc)");

/// Sends `state` for `node` without waiting for the answer; results come through
/// [`next_result`].
async fn request(
    client: &ActuatorClient<Channel>,
    node: &aks_fixture::Node,
    state: AdminState,
) -> tonic::Streaming<NodeResult> {
    let mut watch = client.clone();
    let stream = watch
        .watch_results(WatchResultsRequest {
            node_name: node.name.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut c = client.clone();
    let req = set_req(node, state, WaitFor::Accepted);
    tokio::spawn(async move {
        let _ = c.set_node_admin_state(req).await;
    });
    stream
}

/// The first result of `stream` that `pick` accepts within `within`.
async fn next_result(
    stream: &mut tonic::Streaming<NodeResult>,
    within: Duration,
    pick: impl Fn(&NodeResult) -> bool,
) -> Option<NodeResult> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.message()).await {
            Ok(Ok(Some(r))) if pick(&r) => return Some(r),
            Ok(Ok(Some(_))) => continue,
            _ => return None,
        }
    }
}

fn failed(r: &NodeResult) -> bool {
    phase(r) == ResultPhase::Failed
}

/// Times (since the sim started) of the PUTs to `lb`.
fn put_times(sim: &ArmSim, lb: &str) -> Vec<jiff::Timestamp> {
    let needle = format!("/loadbalancers/{}", lb.to_ascii_lowercase());
    sim.requests()
        .iter()
        .filter(|r| r.method == "PUT")
        .filter(|r| {
            let p = r
                .path
                .split('?')
                .next()
                .unwrap_or_default()
                .to_ascii_lowercase();
            p.ends_with(&needle) || p.contains(&format!("{needle}/"))
        })
        .map(|r| r.received)
        .collect()
}

/// The reason names ARM's request and correlation ids, and stays short.
fn assert_traceable(reason: &str) {
    assert!(reason.contains("x-ms-request-id "), "{reason}");
    assert!(reason.contains("x-ms-correlation-request-id "), "{reason}");
    assert!(reason.len() <= 600, "{} bytes: {reason}", reason.len());
}

/// N8 (1): a lock the LB's GET does not show (another operation on a resource it uses) used to
/// be retried GET+PUT every 50-150 ms forever, with no result and no regard for Retry-After.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_conflicts_honour_retry_after_and_end_in_a_failed_result() {
    let (sim, cluster) = start_sim("aks").await;
    let mut tuning = fast_tuning();
    tuning.lock_retry_after_secs = 1;
    sim.set_tuning(tuning);
    let a = start_actuator(&sim, &cluster, &[]).await;
    sim.faults(FaultSpec {
        lock_conflicts: Some(1_000_000),
        ..Default::default()
    });
    let node = &cluster.nodes[3];
    let start = Instant::now();
    let mut results = request(&a.client, node, AdminState::Down).await;
    let r = next_result(&mut results, Duration::from_secs(20), failed)
        .await
        .expect("a FAILED result once the lock conflicts exceed the cap");
    let took = start.elapsed();
    assert!(r.will_retry, "{r:?}");
    assert!(
        r.reason.contains("RetryableErrorDueToAnotherOperation"),
        "{}",
        r.reason
    );
    assert_traceable(&r.reason);
    // Retry-After (1 s) between PUTs of one LB: never two within it.
    for lb in ["kubernetes", "kubernetes-internal"] {
        let times = put_times(&sim, lb);
        assert!(times.len() >= 2, "{lb}: {times:?}");
        for w in times.windows(2) {
            let gap = w[1].duration_since(w[0]).as_secs_f64();
            assert!(
                gap >= 0.95,
                "{lb}: PUTs {gap:.3} s apart, Retry-After is 1 s"
            );
        }
        assert!(
            times.len() as f64 <= took.as_secs_f64() + 2.0,
            "{lb}: {} PUTs in {took:?}",
            times.len()
        );
    }
    // And it backs off: the next attempts come slower still.
    let before = puts(&sim, "kubernetes");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(puts(&sim, "kubernetes") - before <= 2);
    // Once the lock is gone the write goes through on its own.
    sim.faults(FaultSpec {
        lock_conflicts: Some(0),
        ..Default::default()
    });
    wait_until("written after the lock went", || async {
        all_are(&sim, &cluster, node, "Down")
    })
    .await;
}

/// N8 (2): `ReferencedResourceNotProvisioned` on one LB used to pause the whole write class
/// for its Retry-After, again at every retry: other LBs could not be written meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn referenced_resource_not_provisioned_backs_off_only_that_lb() {
    let (sim, cluster) = start_sim("aks").await;
    let a = start_actuator(&sim, &cluster, &[]).await;
    sim.faults(FaultSpec {
        not_provisioned: Some(NotProvisioned {
            lb: "kubernetes".into(),
            writes: 1_000_000,
            retry_after_secs: 4,
        }),
        ..Default::default()
    });
    let first = &cluster.nodes[1];
    let _r1 = request(&a.client, first, AdminState::Down).await;
    wait_until("the public LB refused a write", || async {
        sim.requests()
            .iter()
            .any(|r| r.method == "PUT" && r.status == 429)
    })
    .await;
    // A second node, right after: its internal LB entries go Down at once.
    let second = &cluster.nodes[2];
    let start = Instant::now();
    let _r2 = request(&a.client, second, AdminState::Down).await;
    let internal = |n| sim_states_on(&sim, &cluster, n, |lb| lb == "kubernetes-internal");
    loop {
        let s = internal(second);
        if !s.is_empty() && s.iter().all(|(_, _, st)| st == "Down") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_millis(2500),
            "the internal LB waited on the public LB's refusal: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The refused LB honours its Retry-After (4 s) between attempts.
    let times = put_times(&sim, "kubernetes");
    for w in times.windows(2) {
        let gap = w[1].duration_since(w[0]).as_secs_f64();
        assert!(
            gap >= 3.9,
            "public LB PUTs {gap:.3} s apart, Retry-After is 4 s"
        );
    }
    assert!(
        sim_states_on(&sim, &cluster, first, |lb| lb == "kubernetes")
            .iter()
            .all(|(_, _, st)| st == "None")
    );
}

/// N8 (3): 412 after 412 (a busy outside writer) used to be re-read and re-sent forever
/// without a result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_etag_loop_is_bounded_and_reported() {
    let (sim, cluster) = start_sim("aks").await;
    let a = start_actuator(&sim, &cluster, &[]).await;
    sim.faults(FaultSpec {
        stale_writes: Some(1_000_000),
        ..Default::default()
    });
    let node = &cluster.nodes[5];
    let mut results = request(&a.client, node, AdminState::Down).await;
    let r = next_result(&mut results, Duration::from_secs(15), failed)
        .await
        .expect("a FAILED result once 412s exceed the cap");
    assert!(r.will_retry, "{r:?}");
    assert!(r.reason.contains("412"), "{}", r.reason);
    assert_traceable(&r.reason);
    // Backing off, not spinning.
    let before = puts(&sim, "kubernetes") + puts(&sim, "kubernetes-internal");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = puts(&sim, "kubernetes") + puts(&sim, "kubernetes-internal");
    assert!(after - before <= 4, "{} PUTs in 1 s", after - before);
    sim.faults(FaultSpec {
        stale_writes: Some(0),
        ..Default::default()
    });
    wait_until("written once the other writer stopped", || async {
        all_are(&sim, &cluster, node, "Down")
    })
    .await;
}

/// Issue 27 item 6: every ARM and token request names us; ARM requests carry a fresh
/// `x-ms-client-request-id` per logical call, the same one on that call's retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_carry_our_user_agent_and_one_client_request_id_per_logical_call() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    // Two lock conflicts, then the write goes through: three PUTs of one logical write.
    sim.faults(FaultSpec {
        lock_conflicts: Some(2),
        ..Default::default()
    });
    let node = &cluster.nodes[7];
    a.client
        .set_node_admin_state(set_req(node, AdminState::Down, WaitFor::Effective))
        .await
        .unwrap();
    // A 401 retried once with a new token: the same call.
    sim.expire_tokens();
    a.client
        .set_node_admin_state(set_req(node, AdminState::None, WaitFor::Effective))
        .await
        .unwrap();
    let reqs = sim.requests();
    let token_reqs: Vec<_> = reqs
        .iter()
        .filter(|r| r.path.contains("/oauth2/"))
        .collect();
    assert!(!token_reqs.is_empty());
    // The replica is named (common.rs starts it as `test-actuator`).
    let ours = actuator_svc::arm::transport::user_agent("test-actuator");
    for r in &reqs {
        let ua = r.user_agent.as_deref().unwrap_or_default();
        assert!(ua.starts_with(&ours), "{} {}: {ua:?}", r.method, r.path);
    }
    let arm: Vec<_> = reqs
        .iter()
        .filter(|r| r.path.starts_with("/subscriptions/"))
        .collect();
    for r in &arm {
        let id = r.client_request_id.as_deref().unwrap_or_default();
        let parsed = uuid::Uuid::parse_str(id).unwrap_or_else(|_| panic!("{id:?}"));
        assert_eq!(parsed.get_version_num(), 4, "{id}");
    }
    // The PUTs refused for the lock share their logical write's id with the PUT that passed.
    let puts: Vec<_> = arm
        .iter()
        .filter(|r| {
            r.method == "PUT"
                && r.path
                    .to_ascii_lowercase()
                    .ends_with("/loadbalancers/kubernetes?api-version=2024-03-01")
        })
        .collect();
    let locked = puts.iter().filter(|r| r.lock_hit).count();
    assert!(locked >= 1, "{puts:?}");
    let first = puts[0].client_request_id.clone();
    assert!(
        puts[..=locked].iter().all(|r| r.client_request_id == first),
        "{puts:#?}"
    );
    // The 401 and its retry: one id; distinct logical calls: distinct ids.
    let denied = arm.iter().position(|r| r.status == 401).expect("a 401");
    let retried = arm[denied + 1..]
        .iter()
        .find(|r| r.method == arm[denied].method && r.path == arm[denied].path)
        .unwrap();
    assert_eq!(retried.client_request_id, arm[denied].client_request_id);
    let gets: std::collections::BTreeSet<_> = arm
        .iter()
        .filter(|r| r.method == "GET" && r.status == 200)
        .map(|r| r.client_request_id.clone())
        .collect();
    assert!(gets.len() >= 3, "{gets:?}");
}

/// The actuator's HTTPS client, trusting the simulator's CA.
fn sim_transport(sim: &ArmSim) -> Transport {
    let pem = sim.ca_pem().unwrap().as_bytes();
    let roots = rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    Transport::new(&roots).unwrap()
}

/// An ARM client with arm-sim's credential, pointed at `endpoint` ([`client_with`] its metrics).
fn client(sim: &ArmSim, endpoint: &str) -> ArmClient {
    client_with(sim, endpoint, Arc::new(Metrics::new()))
}

fn client_with(sim: &ArmSim, endpoint: &str, metrics: Arc<Metrics>) -> ArmClient {
    let creds = sim.credentials();
    let cred = credentials::build(
        &CredentialChoice::ClientSecret {
            client_id: creds.client_id.clone(),
            secret: creds.client_secret.clone(),
        },
        &creds.tenant_id,
        &url::Url::parse(&sim.aad_authority()).unwrap(),
        sim_transport(sim),
        Sources {
            reread_every: Duration::ZERO,
            cloud_config: None,
        },
    )
    .unwrap();
    let now = tokio::time::Instant::now();
    ArmClient::new(
        sim_transport(sim),
        cred,
        Scope {
            endpoint: url::Url::parse(endpoint).unwrap(),
            subscription_id: creds.subscription_id.clone(),
            lb_resource_group: "rg".into(),
            node_resource_group: "rg".into(),
        },
        Arc::new(parking_lot::Mutex::new(Budget::new(
            DEFAULT_READ,
            DEFAULT_WRITE,
            now,
        ))),
        metrics,
        Duration::from_secs(5),
    )
}

/// A listener standing for a foreign host: counts the connections it gets.
async fn foreign_host() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h = hits.clone();
    tokio::spawn(async move {
        while let Ok((_s, _)) = l.accept().await {
            h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    (port, hits)
}

/// Refused by the client itself, naming why.
fn refused(e: &ArmError) -> bool {
    e.to_string().contains("refused to send the ARM token to ")
}

/// Issue 27 item 7: an operation URL naming another host (or scheme, or port) is refused and
/// never sent the token; an http endpoint is accepted only on loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_goes_only_to_the_configured_arm_host() {
    let (sim, _cluster) = start_sim("aks").await;
    let (port, hits) = foreign_host().await;
    let arm = client(&sim, sim.url());
    let sub = sim.credentials().subscription_id;
    let op_path = format!(
        "/subscriptions/{sub}/providers/Microsoft.Network/locations/eastus/operations/x?api-version=2024-03-01"
    );
    let sim_host = sim.url().trim_start_matches("http://").to_string();
    for foreign in [
        format!("http://127.0.0.1:{port}{op_path}"),
        format!("https://127.0.0.1:{port}{op_path}"),
        format!("https://{sim_host}{op_path}"),
        format!("http://localhost:{}{op_path}", sim.addr().port()),
        format!("https://management.azure.com{op_path}"),
    ] {
        let e = arm
            .poll(&url::Url::parse(&foreign).unwrap())
            .await
            .expect_err(&foreign);
        assert!(refused(&e), "{foreign}: {e}");
        let text = e.to_string();
        assert!(text.contains("not the configured ARM endpoint"), "{text}");
        assert!(
            !text.contains("x?api-version"),
            "no query in the error: {text}"
        );
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert!(
        sim.requests()
            .iter()
            .all(|r| !r.path.contains("/operations/x")),
        "nothing reached the simulator either"
    );
    // The configured host itself is fine (an unknown operation: 404, with ARM's ids).
    let e = arm
        .poll(&url::Url::parse(&format!("{}{op_path}", sim.url())).unwrap())
        .await
        .unwrap_err();
    assert_eq!(e.status(), 404, "{e}");
    assert!(e.to_string().contains("x-ms-request-id "), "{e}");

    // Plain http to a host that is not loopback: refused before any token is asked for.
    let tokens = sim
        .requests()
        .iter()
        .filter(|r| r.path.contains("/oauth2/"))
        .count();
    let remote = client(&sim, "http://management.azure.com");
    let e = remote.get_lb("kubernetes").await.unwrap_err();
    assert!(refused(&e), "{e}");
    assert!(e.to_string().contains("https"), "{e}");
    assert_eq!(
        sim.requests()
            .iter()
            .filter(|r| r.path.contains("/oauth2/"))
            .count(),
        tokens
    );
}

/// Issue 27 item 7: a `nextLink` to another host ends the listing with an error, and the
/// other host never sees a request. The ARM side is a stub serving one page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_link_to_another_host_is_refused() {
    let (sim, _cluster) = start_sim("aks").await;
    let (port, hits) = foreign_host().await;
    let stub = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stub_port = stub.local_addr().unwrap().port();
    let auth_seen = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let seen = auth_seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = stub.accept().await {
            let mut buf = vec![0u8; 16 * 1024];
            let n = s.read(&mut buf).await.unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            seen.lock().push(head);
            let body = format!(
                r#"{{"value":[],"nextLink":"http://127.0.0.1:{port}/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces?page=2"}}"#
            );
            let rsp = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nx-ms-request-id: r1\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(rsp.as_bytes()).await;
        }
    });
    let arm = client(&sim, &format!("http://127.0.0.1:{stub_port}"));
    let e = arm.list_nics().await.unwrap_err();
    assert!(refused(&e), "{e}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    let seen = auth_seen.lock();
    assert_eq!(seen.len(), 1, "one page from the configured host");
    let head = seen[0].to_ascii_lowercase();
    assert!(head.contains("authorization: bearer "), "{head}");
    assert!(
        head.contains(&format!("user-agent: {}", USER_AGENT.to_ascii_lowercase())),
        "{head}"
    );
    assert!(head.contains("x-ms-client-request-id: "), "{head}");
}

/// Issue 29 item 7: a NIC the listing cannot read is reported (kept in the map's list and
/// counted), not dropped; a NIC with an unrelated field of another type still maps to its VM.
/// The ARM side is a stub serving one page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_nic_is_counted_and_the_others_are_read() {
    let (sim, _cluster) = start_sim("aks").await;
    let stub = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stub_port = stub.local_addr().unwrap().port();
    let nic = |name: &str| {
        format!(
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/{name}"
        )
    };
    let vm = |name: &str| serde_json::json!({"id": format!("/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/{name}")});
    let page = serde_json::json!({"value": [
        {"id": nic("vm1-nic"), "properties": {"virtualMachine": vm("vm1")}},
        {"id": nic("vm2-nic"), "properties": {"virtualMachine": vm("vm2"), "enableAcceleratedNetworking": "true"}},
        {"id": nic("detached"), "properties": {}},
        {"id": nic("broken"), "properties": {"virtualMachine": {"id": 42}}},
    ]})
    .to_string();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = stub.accept().await {
            let mut buf = vec![0u8; 16 * 1024];
            let _ = s.read(&mut buf).await;
            let rsp = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nx-ms-request-id: r1\r\n\r\n{page}",
                page.len()
            );
            let _ = s.write_all(rsp.as_bytes()).await;
        }
    });
    let metrics = Arc::new(Metrics::new());
    let arm = client_with(
        &sim,
        &format!("http://127.0.0.1:{stub_port}"),
        metrics.clone(),
    );
    let map = arm.list_nics().await.unwrap();
    assert_eq!(map.len(), 2);
    assert!(map.vm_of(&nic("vm2-nic").to_ascii_lowercase()).is_some());
    let bad: Vec<_> = map
        .unreadable()
        .iter()
        .map(|u| (&*u.nic, &*u.reason))
        .collect();
    assert_eq!(
        bad,
        [(
            &*nic("broken"),
            "`properties.virtualMachine.id`: invalid type: integer `42`, expected a string"
        )]
    );
    assert!(
        metrics
            .encode()
            .contains("cutover_actuator_nics_unreadable_total 1\n"),
        "{}",
        metrics.encode()
    );
}

/// Issue 27 item 7: an http ARM endpoint off loopback is refused at start-up, naming the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_endpoint_off_loopback_is_refused_at_start() {
    let (sim, cluster) = start_sim("aks").await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &cluster);
    let mut args = base_args(&sim, &config);
    let pos = args.iter().position(|a| a == "--arm-endpoint").unwrap();
    args[pos + 1] = "http://management.azure.com".into();
    let Err(e) = actuator_svc::runtime::start(
        <actuator_svc::config::cli::Args as clap::Parser>::try_parse_from(args).unwrap(),
        actuator_svc::config::azure_json::EnvOverrides::default(),
    )
    .await
    else {
        panic!("started with a plain http endpoint off loopback");
    };
    let text = format!("{e:#}");
    assert!(text.contains("--arm-endpoint"), "{text}");
    assert!(text.contains("use https"), "{text}");
}

/// A forward proxy on loopback that tunnels `CONNECT host:port` and records each target.
async fn connect_proxy() -> (u16, Arc<parking_lot::Mutex<Vec<String>>>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let targets = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let seen = targets.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = l.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if client.read_exact(&mut byte).await.is_err() {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_string();
                let Some(target) = head
                    .strip_prefix("CONNECT ")
                    .and_then(|r| r.split_whitespace().next())
                    .map(str::to_owned)
                else {
                    let _ = client
                        .write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
                        .await;
                    return;
                };
                seen.lock().push(target.clone());
                let Ok(mut upstream) = tokio::net::TcpStream::connect(&target).await else {
                    let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                    return;
                };
                if client
                    .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                    .await
                    .is_ok()
                {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
            });
        }
    });
    (port, targets)
}

/// An ARM client whose token and ARM requests use `proxy`, pointed at the simulator's TLS
/// side (https, as in production).
fn proxied_client(sim: &ArmSim, proxy: hyper_util::client::proxy::matcher::Matcher) -> ArmClient {
    let pem = sim.ca_pem().unwrap().as_bytes();
    let roots = rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let http = Transport::with_proxy(&roots, proxy).unwrap();
    let creds = sim.credentials();
    let cred = credentials::build(
        &CredentialChoice::ClientSecret {
            client_id: creds.client_id.clone(),
            secret: creds.client_secret.clone(),
        },
        &creds.tenant_id,
        &url::Url::parse(&sim.aad_authority()).unwrap(),
        http.clone(),
        Sources {
            reread_every: Duration::ZERO,
            cloud_config: None,
        },
    )
    .unwrap();
    let cluster = aks_fixture::preset("aks").unwrap();
    ArmClient::new(
        http,
        cred,
        Scope {
            endpoint: url::Url::parse(&sim.https_url()).unwrap(),
            subscription_id: creds.subscription_id.clone(),
            lb_resource_group: cluster.resource_group.clone(),
            node_resource_group: cluster.resource_group.clone(),
        },
        Arc::new(parking_lot::Mutex::new(Budget::new(
            DEFAULT_READ,
            DEFAULT_WRITE,
            tokio::time::Instant::now(),
        ))),
        Arc::new(Metrics::new()),
        Duration::from_secs(5),
    )
}

/// Issue 27 item 5: with an HTTPS proxy configured, token and ARM requests go through its
/// CONNECT tunnel (TLS end to end inside); a NO_PROXY entry covering the host bypasses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_and_arm_requests_go_through_the_https_proxy_unless_no_proxy_covers_them() {
    use hyper_util::client::proxy::matcher::Matcher;
    let (sim, _cluster) = start_sim("aks").await;
    let (port, targets) = connect_proxy().await;
    let proxy = format!("http://127.0.0.1:{port}");
    let sim_target = sim.addr().to_string();

    let arm = proxied_client(&sim, Matcher::builder().https(proxy.clone()).build());
    let lb = arm.get_lb("kubernetes").await.unwrap();
    assert!(lb.is_some_and(|b| !b.is_empty()));
    let tunnelled = targets.lock().clone();
    assert!(!tunnelled.is_empty(), "nothing went through the proxy");
    assert!(tunnelled.iter().all(|t| *t == sim_target), "{tunnelled:?}");
    let reqs = sim.requests();
    assert!(
        reqs.iter().any(|r| r.path.contains("/oauth2/")),
        "token request"
    );
    assert!(
        reqs.iter()
            .any(|r| r.method == "GET" && r.path.contains("/loadBalancers/kubernetes")),
        "ARM request"
    );

    // NO_PROXY names the host: straight there.
    targets.lock().clear();
    let direct = proxied_client(
        &sim,
        Matcher::builder()
            .https(proxy.clone())
            .no("localhost, 127.0.0.0/8")
            .build(),
    );
    assert!(direct.get_lb("kubernetes").await.unwrap().is_some());
    assert!(targets.lock().is_empty(), "{:?}", targets.lock());

    // A proxy that is down: the error says so, and nothing bypasses it.
    let pem = sim.ca_pem().unwrap().as_bytes();
    let roots = rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let dead = Transport::with_proxy(
        &roots,
        Matcher::builder()
            .https("http://127.0.0.1:9".to_string())
            .build(),
    )
    .unwrap();
    let before = sim.requests().len();
    let req = http::Request::get(format!("{}/subscriptions", sim.https_url()))
        .body(actuator_svc::arm::body::ChunkBody::empty())
        .unwrap();
    let e = dead.send(req).await.unwrap_err();
    assert!(
        e.to_string().contains("through the HTTPS proxy 127.0.0.1"),
        "{e}"
    );
    assert_eq!(sim.requests().len(), before);
}
