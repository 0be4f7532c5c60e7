//! The cutover sandbox and whole-system tests.
//!
//! Everything runs as real processes on loopback: `kube-sim` and `arm-sim` seeded with the
//! same AKS-like cluster (`aks-fixture`), then signal-svc (two replicas, leader-elected) and
//! actuator-svc (two replicas, mutual TLS) pointed at them. Scenarios act on the cluster through
//! the Kubernetes API, and judge the outcome from the ARM simulator's request and effective
//! logs: the exact end state of every backend entry, the time from taint to effective, the ARM
//! budget spent, and the absence of flapping.

pub mod bins;
pub mod certs;
pub mod chaos;
pub mod departures;
pub mod fleet_sim;
pub mod helm;
pub mod http;
pub mod images;
pub mod judge;
pub mod kube_ops;
pub mod kube_side;
pub mod manifests;
pub mod observe;
pub mod report;
pub mod results;
pub mod sandbox;
pub mod scale;
pub mod scenarios;
pub mod smoke;
pub mod stack;
pub mod wave;
