//! The real-Azure kit (azure-kit/) cannot run here; its prober and analysis run against the
//! simulator instead: the user-space LB with two members, admin `Down` applied 0.8 s after the
//! "operation Succeeded" mark, then the member removed with blackholed flows. analyze.py must
//! find U1 = 0.8 s after Succeeded (not before), U12 = established flows kept, U4 = blackhole.

#![allow(clippy::unwrap_used)]

use cutover_dataplane::helper::now;
use cutover_dataplane::kernel::{DataPath, Spawner};
use cutover_dataplane::userspace::ProxyPath;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

fn kit() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("azure-kit")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kit_prober_and_analysis_recover_the_simulators_unknowns() {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("SKIPPED: python3 not found");
        return;
    }
    let dir = tempfile_dir();
    let muxes = 4;
    let mut path = ProxyPath::start(2, muxes).await.unwrap();
    let spawner = Spawner {
        exe: PathBuf::from(env!("CARGO_BIN_EXE_dataplane_bench")),
    };
    let mut members = Vec::new();
    for i in 0..2 {
        let args: Vec<String> = [
            "helper-member",
            "--id",
            &i.to_string(),
            "--bind",
            "127.0.0.1",
            "--service",
            "0",
            "--healthz",
            "0",
            "--hcnp",
            "0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut ch = spawner.spawn(None, &args).unwrap();
        let mut l = BufReader::new(ch.stdout.take().unwrap()).lines();
        let ready: serde_json::Value =
            serde_json::from_str(&l.next_line().await.unwrap().unwrap()).unwrap();
        let port = ready["ports"][0].as_u64().unwrap();
        path.set_member_addr(i, format!("127.0.0.1:{port}").parse().unwrap());
        members.push(ch);
    }
    let log = dir.join("probe.jsonl");
    let prober = tokio::process::Command::new("python3")
        .arg(kit().join("prober.py"))
        .args([
            "--target",
            &path.vip.to_string(),
            "--rate",
            "100",
            "--streams",
            "12",
            "--duration",
            "9",
            "--connect-timeout",
            "1",
            "--hung-after",
            "1.5",
        ])
        .stdout(Stdio::from(std::fs::File::create(&log).unwrap()))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut marks = String::new();
    let mark = |m: &str, marks: &mut String| {
        marks.push_str(&format!(
            "{{\"mark\":\"{m}\",\"t\":{},\"backend\":\"0\"}}\n",
            now()
        ));
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    mark("down_put", &mut marks);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    mark("down_succeeded", &mut marks);
    tokio::time::sleep(Duration::from_millis(800)).await; // U1: 0.8 s after Succeeded
    for m in 0..muxes {
        path.set_eligible(m, &[1]).unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    mark("remove_succeeded", &mut marks);
    path.kill(0).unwrap(); // U4 in the simulator: blackhole
    let out = prober.wait_with_output().await.unwrap();
    assert!(out.status.success());
    std::fs::write(dir.join("marks.jsonl"), &marks).unwrap();
    let out = std::process::Command::new("python3")
        .arg(kit().join("analyze.py"))
        .arg(&log)
        .arg(dir.join("marks.jsonl"))
        .args(["--window", "3"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    println!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success());
    let line = text.lines().last().unwrap();
    let params: std::collections::BTreeMap<&str, &str> = line
        .trim_start_matches("dataplane_bench --unknowns ")
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    assert_eq!(params["apply_before_lro"], "false", "{text}");
    let lag: f64 = params["admin_apply_lag_max"].parse().unwrap();
    assert!(
        (0.55..=1.1).contains(&lag),
        "U1 lag {lag}, applied 0.8 s after Succeeded"
    );
    assert_eq!(params["down_resets_established"], "false", "{text}");
    assert_eq!(params["removed_member_flows"], "blackhole", "{text}");
    // What it prints is what the bench takes.
    let mut u = cutover_dataplane::params::Unknowns::default();
    for (k, v) in &params {
        u.set(k, v).unwrap();
    }
    drop(members);
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("cdp-kit-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
