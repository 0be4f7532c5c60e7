//! `cutoverctl` against real actuators over mutual TLS: set with a wait, get fresh from ARM,
//! list held entries, JSON output, and the clear refusals (unknown certificate, a certificate
//! with only a CN, bad input).

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

use cutover_e2e::judge::{self, State};
use cutover_e2e::sandbox::Sandbox;
use cutover_e2e::stack::StackOptions;
use std::process::Output;

fn command(
    sb: &Sandbox,
    cert: &cutover_e2e::certs::CertFiles,
    args: &[&str],
) -> std::process::Command {
    let port = sb.stack.actuators[0].grpc_port.unwrap();
    let mut c = std::process::Command::new(cutover_e2e::bins::path("cutoverctl").unwrap());
    c.args(args)
        .env("CUTOVER_ENDPOINT", format!("https://127.0.0.1:{port}"))
        .env("CUTOVER_TLS_CA", &sb.stack.pki.ca)
        .env("CUTOVER_TLS_CERT", &cert.cert)
        .env("CUTOVER_TLS_KEY", &cert.key)
        .env("CUTOVER_TLS_SERVER_NAME", cutover_e2e::certs::ACTUATOR_NAME);
    c
}

fn ctl(sb: &Sandbox, cert: &cutover_e2e::certs::CertFiles, args: &[&str]) -> Output {
    command(sb, cert, args).output().unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "cutoverctl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cutoverctl_sets_gets_and_lists_through_the_actuator() {
    let dir = std::env::temp_dir().join(format!("cutover-e2e-ctl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut sb = Sandbox::start(StackOptions::fast("aks", 8, dir))
        .await
        .unwrap();
    let tool = sb.stack.pki.tool.clone();
    let node = sb.fresh_nodes("userpool", 1).unwrap().remove(0);
    let n = sb.stack.cluster.node(&node).unwrap().clone();
    let since = jiff::Timestamp::now();

    // Set Down, waiting until it is effective on every entry.
    let set = json(&ctl(
        &sb,
        &tool,
        &[
            "-o",
            "json",
            "set",
            &node,
            "down",
            "--provider-id",
            &n.provider_id,
            "--ip",
            &n.ipv4.to_string(),
            "--ip",
            &n.ipv6.to_string(),
            "--reason",
            "maintenance 42",
            "--wait",
            "effective",
        ],
    ));
    assert_eq!(set["phase"], "Effective", "{set}");
    assert_eq!(set["entries"].as_array().unwrap().len(), 4, "{set}");
    // ARM agrees, on every entry of the node.
    let log = cutover_e2e::observe::changes(&sb.stack.arm);
    assert!(judge::time_to_effective(&sb.stack.cluster, &log, &node, State::Down, since).is_some());

    // Get reads the four entries back from ARM.
    let get = json(&ctl(
        &sb,
        &tool,
        &[
            "-o",
            "json",
            "get",
            &node,
            "--provider-id",
            &n.provider_id,
            "--fresh",
        ],
    ));
    let entries = get["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 4, "{get}");
    assert!(entries.iter().all(|e| e["adminState"] == "Down"), "{get}");

    // List shows the node held Down, with the reason given.
    let list = json(&ctl(&sb, &tool, &["-o", "json", "list"]));
    let held = list
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["node"]["name"] == node.as_str())
        .unwrap_or_else(|| panic!("{node} not listed: {list}"));
    assert_eq!(held["reasons"][0], "maintenance 42");

    // The table form names the node too.
    // Its reader gone (`cutoverctl list | head -0`): exit 141 as SIGPIPE would, no panic,
    // never a success a drain script could mistake.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let closed = command(&sb, &tool, &["-o", "json", "list"])
        .stdout(writer)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&closed.stderr);
    assert_eq!(closed.status.code(), Some(141), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let table = ctl(&sb, &tool, &["list"]);
    assert!(String::from_utf8_lossy(&table.stdout).contains(&node));

    // Back to None.
    let none = json(&ctl(
        &sb,
        &tool,
        &[
            "-o",
            "json",
            "set",
            &node,
            "none",
            "--provider-id",
            &n.provider_id,
            "--wait",
            "effective",
        ],
    ));
    assert_eq!(none["phase"], "Effective", "{none}");

    // A certificate from the right CA but on no allow-list is refused with a clear message.
    let stranger = sb.stack.pki.stranger.clone();
    let refused = ctl(&sb, &stranger, &["get", &node]);
    assert_eq!(refused.status.code(), Some(1));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("PermissionDenied"), "{err}");
    // One whose subject CN names the tool but that has no SAN: a CN is never an identity.
    let cn_only = sb.stack.pki.cn_only.clone();
    let refused = ctl(&sb, &cn_only, &["get", &node]);
    assert_eq!(refused.status.code(), Some(1));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("Unauthenticated") && err.contains("no DNS or URI subject alternative name"),
        "{err}"
    );

    // Bad input: the actuator names the field; a bad flag is a usage error.
    let bad = ctl(&sb, &tool, &["get", ""]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("InvalidArgument"));
    let usage = ctl(&sb, &tool, &["set", &node, "sideways"]);
    assert_eq!(usage.status.code(), Some(2));
    sb.stack.stop().await;
}
