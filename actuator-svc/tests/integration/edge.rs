//! Input refused at the edge, through a real tonic client: hostile node names, a zero wait, an
//! oversize message; reflection v1alpha; gRPC health following readiness and drain.

use crate::common::*;
use actuator_svc::grpc::health;
use actuator_svc::inbound::validate;
use cutover_proto::v1::*;
use cutover_runtime::admin::ReadyFn;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio_stream::StreamExt;
use tonic::Code;
use tonic::transport::{Channel, Server};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

fn named(name: &str) -> NodeRef {
    NodeRef {
        name: name.into(),
        ..Default::default()
    }
}

fn assert_short_inert(status: &tonic::Status, field: &str) {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let msg = status.message();
    assert!(msg.starts_with(field), "{msg}");
    assert!(msg.len() < 400, "the refusal echoes {} bytes", msg.len());
    assert!(
        !msg.chars().any(validate::is_unsafe_char),
        "raw control characters in {msg:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_is_refused_before_it_reaches_the_store() {
    let (sim, cluster) = start_sim("aks").await;
    // No background refresh during the test: every ARM call would be one of ours.
    let mut a = start_actuator(&sim, &cluster, &["--pool-refresh-interval", "1h"]).await;
    // Start-up reads may still be in flight just after readiness (seen on a loaded machine):
    // count from once they settled.
    let mut reads_before = sim.requests().len();
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let now = sim.requests().len();
        if now == reads_before {
            break;
        }
        reads_before = now;
    }

    let megabyte = "a".repeat(1 << 20);
    let hostile = [
        megabyte.as_str(),
        "aks-node\0",
        "aks-node\u{7}",
        "aks-node\u{1b}[2J\u{1b}]0;owned\u{7}",
        "aks-node\nINFO forged log line",
    ];
    for name in hostile {
        let set = a
            .client
            .set_node_admin_state(SetNodeAdminStateRequest {
                node: Some(named(name)),
                admin_state: AdminState::Down as i32,
                wait: WaitFor::Effective as i32,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_short_inert(&set, "node.name: \"");
        let get = a
            .client
            .get_node_admin_state(GetNodeAdminStateRequest {
                node: Some(named(name)),
                fresh: true,
            })
            .await
            .unwrap_err();
        assert_short_inert(&get, "node.name: \"");
    }
    let zero = a
        .client
        .set_node_admin_state(SetNodeAdminStateRequest {
            node: Some(node_ref(&cluster.nodes[0])),
            admin_state: AdminState::Down as i32,
            wait: WaitFor::Effective as i32,
            wait_timeout: Some(prost_types::Duration {
                seconds: 0,
                nanos: 0,
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_short_inert(&zero, "wait_timeout: must be positive");

    // Nothing was stored and no ARM call was spent on any of it.
    let held = a
        .client
        .list_held_entries(ListHeldEntriesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(held.nodes.is_empty(), "{:?}", held.nodes);
    assert_eq!(sim.requests().len(), reads_before, "ARM calls were made");
    assert!(all_are(&sim, &cluster, &cluster.nodes[0], "None"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_above_the_limit_are_refused_by_the_codec() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let huge = "r".repeat(validate::MAX_DECODED_MESSAGE + 1);
    let e = a
        .client
        .set_node_admin_state(SetNodeAdminStateRequest {
            node: Some(node_ref(&cluster.nodes[0])),
            admin_state: AdminState::Down as i32,
            reason: huge,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    assert!(e.message().contains("too large"), "{}", e.message());
    // The server is still there for well-formed callers.
    a.client
        .list_held_entries(ListHeldEntriesRequest::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_answers_as_v1alpha_too() {
    use tonic_reflection::pb::v1alpha::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    };
    let (sim, cluster) = start_sim("aks").await;
    let a = start_actuator(&sim, &cluster, &[]).await;
    let ch = Channel::from_shared(format!("http://{}", a.running.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut refl = ServerReflectionClient::new(ch);
    let reqs = vec![
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        },
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::FileContainingSymbol(
                "cutover.v1.Actuator".into(),
            )),
        },
    ];
    let mut out = refl
        .server_reflection_info(tokio_stream::iter(reqs))
        .await
        .unwrap()
        .into_inner();
    let msg = out.next().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = msg.message_response else {
        panic!("{msg:?}")
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    for want in [
        "cutover.v1.Actuator",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let msg = out.next().await.unwrap().unwrap();
    let Some(MessageResponse::FileDescriptorResponse(files)) = msg.message_response else {
        panic!("{msg:?}")
    };
    assert!(!files.file_descriptor_proto.is_empty());
}

async fn status_of(client: &mut HealthClient<Channel>, service: &str) -> i32 {
    client
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
}

/// Health follows a readiness closure: NOT_SERVING before ready, SERVING when ready, and
/// NOT_SERVING for good once the drain starts, for the server ("") and the actuator service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_readiness_then_drain() {
    let ready_flag = Arc::new(AtomicBool::new(false));
    let ready: ReadyFn = {
        let flag = ready_flag.clone();
        Arc::new(move || {
            if flag.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err("no token yet".into())
            }
        })
    };
    let (reporter, service) = health::reporter().await;
    let (drain, drain_rx) = tokio::sync::watch::channel(false);
    let follower = tokio::spawn(health::follow(reporter, ready, drain_rx));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let ch = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(ch);
    let mut watch = client
        .watch(HealthCheckRequest {
            service: "cutover.v1.Actuator".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.next().await.unwrap().unwrap().status;
    assert_eq!(first, ServingStatus::NotServing as i32);
    for service in health::FOLLOWED {
        assert_eq!(
            status_of(&mut client, service).await,
            ServingStatus::NotServing as i32,
            "{service:?} before ready"
        );
    }

    ready_flag.store(true, Ordering::SeqCst);
    let next = tokio::time::timeout(WAIT, watch.next()).await.unwrap();
    assert_eq!(next.unwrap().unwrap().status, ServingStatus::Serving as i32);
    for service in health::FOLLOWED {
        assert_eq!(
            status_of(&mut client, service).await,
            ServingStatus::Serving as i32,
            "{service:?} when ready"
        );
    }

    drain.send(true).unwrap();
    let next = tokio::time::timeout(WAIT, watch.next()).await.unwrap();
    assert_eq!(
        next.unwrap().unwrap().status,
        ServingStatus::NotServing as i32
    );
    tokio::time::timeout(WAIT, follower).await.unwrap().unwrap();
    assert_eq!(
        status_of(&mut client, "").await,
        ServingStatus::NotServing as i32,
        "the server stays NOT_SERVING while it drains, even though readiness would pass"
    );
}
