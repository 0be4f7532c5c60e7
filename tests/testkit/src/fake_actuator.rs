//! A recording fake actuator: an `Actuator` gRPC server on 127.0.0.1:0 for testing signal-svc
//! without actuator-svc or ARM (moved from `signal-svc/tests/common/mod.rs`, behind the
//! `fake-actuator` feature).
//!
//! It records every `SignalMessage` signal-svc sends, per stream and with when it arrived
//! ([`StreamLog`]), so a test can ask what signal-svc told the actuator and when: the desired
//! states of snapshots and deltas, forgets, assignments, hellos and their leader epochs, hold
//! acks ([`FakeState`]'s queries). It answers as the real actuator does where signal-svc
//! depends on the answer: a `HelloAck` naming its load balancers, a hello with a leader epoch
//! older than the highest accepted refused with FAILED_PRECONDITION naming it in
//! `cutover-accepted-epoch`, and results per [`Mode`] covering the newest assignment's load
//! balancers (a grown assignment re-reports the open versions). A test can also send results
//! and holds up the newest open stream itself ([`FakeState::report`], [`FakeState::send_up`]).
//! The one-shot tool RPCs are unimplemented.

// Test code: a panic is the failure report, as it was in the test crate.
#![allow(clippy::unwrap_used, clippy::type_complexity)]

mod service;
mod state;

use cutover_proto::v1::actuator_server::ActuatorServer;
use cutover_proto::v1::{ActuatorMessage, SignalMessage};
use parking_lot::Mutex;
use service::FakeSvc;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// ACCEPTED then EFFECTIVE for every state received.
    Effective,
    /// FAILED (will retry) for every state received.
    Fail,
    /// No results at all.
    Silent,
}

#[derive(Debug, Default)]
pub struct StreamLog {
    pub msgs: Vec<SignalMessage>,
    /// When each message was received (same index as `msgs`).
    pub at: Vec<tokio::time::Instant>,
    pub open: bool,
    /// The way back up this stream (for hold requests).
    pub up: Option<mpsc::Sender<Result<ActuatorMessage, tonic::Status>>>,
}

#[derive(Debug)]
pub struct FakeState {
    pub name: String,
    pub streams: Mutex<Vec<StreamLog>>,
    pub mode: Mutex<Mode>,
    /// What the HelloAck reports as managed.
    pub load_balancers: Mutex<Vec<String>>,
    /// The highest leader epoch accepted; lower hellos are refused as the real actuator
    /// does (FAILED_PRECONDITION naming it in `cutover-accepted-epoch`).
    pub max_epoch: Mutex<u64>,
}

pub struct FakeActuator {
    pub addr: SocketAddr,
    pub state: Arc<FakeState>,
    task: JoinHandle<()>,
}

impl FakeActuator {
    pub async fn start(name: &str, mode: Mode) -> Self {
        Self::start_with(name, mode, None).await
    }

    /// With TLS (server identity and, for mTLS, the client CA) when given.
    pub async fn start_with(
        name: &str,
        mode: Mode,
        tls: Option<tonic::transport::ServerTlsConfig>,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(FakeState {
            name: name.into(),
            streams: Mutex::default(),
            mode: Mutex::new(mode),
            load_balancers: Mutex::new(vec!["kubernetes".into()]),
            max_epoch: Mutex::new(0),
        });
        let svc = ActuatorServer::new(FakeSvc(state.clone()));
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = tls {
            builder = builder.tls_config(tls).unwrap();
        }
        let task = tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = builder.add_service(svc).serve_with_incoming(incoming).await;
        });
        Self { addr, state, task }
    }

    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }
}

impl Drop for FakeActuator {
    fn drop(&mut self) {
        self.task.abort();
    }
}
