//! Bad input never crashes the simulator: malformed bodies, wrong media types, odd paths,
//! methods and queries all get a Status with the real code, and the server keeps serving.

#![allow(clippy::unwrap_used)] // tests may unwrap (clippy.toml covers #[test] fns only)

mod common;

use common::{raw, sim};

const SPOT: &str = "aks-spotpool-34567890-vmss000000";

/// A small deterministic PRNG (xorshift) so the garbage is reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }
}

/// (method, path, content type, body, expected HTTP status)
type Case = (
    &'static str,
    String,
    Option<&'static str>,
    &'static [u8],
    u16,
);

#[tokio::test]
async fn specific_bad_inputs_get_the_real_codes() {
    let sim = sim().await;
    let node = format!("/api/v1/nodes/{SPOT}");
    let cases: Vec<Case> = vec![
        (
            "POST",
            "/api/v1/nodes".into(),
            Some("application/json"),
            b"{not json",
            400,
        ),
        (
            "POST",
            "/api/v1/nodes".into(),
            Some("application/json"),
            b"[1,2]",
            400,
        ),
        (
            "POST",
            "/api/v1/nodes".into(),
            Some("text/plain"),
            b"{}",
            415,
        ),
        (
            "POST",
            "/api/v1/nodes".into(),
            Some("application/json"),
            br#"{"kind":"Pod","metadata":{"name":"x"}}"#,
            400,
        ),
        (
            "POST",
            "/api/v1/nodes".into(),
            Some("application/json"),
            br#"{"metadata":{}}"#,
            422,
        ),
        (
            "POST",
            "/api/v1/nodes".into(),
            Some("application/json"),
            br#"{"metadata":{"name":"x"},"spec":{"taints":{"a":1}}}"#,
            400,
        ),
        ("PATCH", node.clone(), Some("application/json"), b"{}", 415),
        (
            "PATCH",
            node.clone(),
            Some("application/merge-patch+json"),
            b"nope",
            400,
        ),
        (
            "PATCH",
            node.clone(),
            Some("application/strategic-merge-patch+json"),
            br#"{"$patch":"explode"}"#,
            400,
        ),
        (
            "PATCH",
            node.clone(),
            Some("application/json-patch+json"),
            br#"{"op":"add"}"#,
            400,
        ),
        (
            "PATCH",
            node.clone(),
            Some("application/json-patch+json"),
            br#"[{"op":"remove","path":"/spec/nothing"}]"#,
            422,
        ),
        (
            "PATCH",
            node.clone(),
            Some("application/merge-patch+json"),
            br#"{"metadata":{"name":"other"}}"#,
            400,
        ),
        (
            "PATCH",
            node.clone(),
            Some("application/merge-patch+json"),
            br#"{"spec":{"unschedulable":"yes"}}"#,
            400,
        ),
        (
            "PATCH",
            format!("{node}?force=true"),
            Some("application/merge-patch+json"),
            b"{}",
            422,
        ),
        (
            "PATCH",
            node.clone(),
            Some("application/apply-patch+yaml"),
            b"spec: {}",
            422,
        ),
        (
            "PATCH",
            "/api/v1/nodes/missing".into(),
            Some("application/merge-patch+json"),
            b"{}",
            404,
        ),
        (
            "PUT",
            node.clone(),
            Some("application/json"),
            br#"{"metadata":{"name":"other"}}"#,
            400,
        ),
        (
            "PUT",
            "/api/v1/nodes/missing".into(),
            Some("application/json"),
            br#"{"metadata":{"name":"missing"}}"#,
            404,
        ),
        (
            "DELETE",
            node.clone(),
            Some("application/json"),
            b"{bad",
            400,
        ),
        (
            "DELETE",
            node.clone(),
            Some("application/json"),
            br#"{"preconditions":{"uid":"other"}}"#,
            409,
        ),
        (
            "GET",
            "/api/v1/nodes?labelSelector=a+in+b".into(),
            None,
            b"",
            400,
        ),
        ("GET", "/api/v1/nodes?limit=many".into(), None, b"", 400),
        ("GET", "/api/v1/nodes?continue=%ZZ".into(), None, b"", 400),
        (
            "GET",
            "/api/v1/nodes?resourceVersion=abc".into(),
            None,
            b"",
            400,
        ),
        (
            "GET",
            "/api/v1/nodes?resourceVersion=99999999&resourceVersionMatch=NotOlderThan".into(),
            None,
            b"",
            504,
        ),
        (
            "GET",
            "/api/v1/namespaces/default/nodes".into(),
            None,
            b"",
            404,
        ),
        ("GET", "/api/v1/nodes/a/b/c/d".into(), None, b"", 404),
        (
            "GET",
            "/apis/events.k8s.io/v1/namespaces/default/events/e/status".into(),
            None,
            b"",
            404,
        ),
        (
            "POST",
            "/api/v1/events".into(),
            Some("application/json"),
            b"{}",
            405,
        ),
        ("DELETE", "/api/v1/nodes".into(), None, b"", 405),
        ("POST", "/api".into(), None, b"", 404),
        (
            "PUT",
            "/_sim/latency".into(),
            Some("application/json"),
            b"{}",
            400,
        ),
    ];
    for (method, path, ct, body, want) in cases {
        let r = raw(&sim, method, &path, ct, body).await;
        assert_eq!(
            r.status,
            want,
            "{method} {path} {}: {}",
            String::from_utf8_lossy(body),
            String::from_utf8_lossy(&r.body)
        );
        let status = r.json();
        assert_eq!(status["kind"], "Status", "{method} {path}");
        assert_eq!(status["code"], want);
    }
    // Still serving, and nothing above changed the node's spec.
    let r = raw(&sim, "GET", &node, None, b"").await;
    assert_eq!(r.status, 200);
    assert!(r.json()["spec"].get("unschedulable").is_none());
    sim.shutdown().await;
}

#[tokio::test]
async fn random_garbage_never_breaks_the_server() {
    let sim = sim().await;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let methods = ["GET", "POST", "PUT", "PATCH", "DELETE"];
    let paths = [
        "/api/v1/nodes",
        "/api/v1/nodes/aks-spotpool-34567890-vmss000000",
        "/api/v1/nodes/aks-spotpool-34567890-vmss000000/status",
        "/api/v1/namespaces/default/events",
        "/api/v1/namespaces/default/events/x",
        "/apis/events.k8s.io/v1/namespaces/default/events",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
    ];
    let types = [
        "application/json",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/json-patch+json",
        "application/apply-patch+yaml",
        "application/yaml",
        "image/png",
    ];
    let queries = [
        "",
        "?watch=true&timeoutSeconds=1",
        "?limit=1",
        "?fieldSelector=%00",
        "?labelSelector=(((",
        "?resourceVersion=0&resourceVersionMatch=Exact",
        "?dryRun=All",
        "?&&=&",
    ];
    let fragments: [&[u8]; 8] = [
        br#"{"metadata":{"name":"x","labels":{"a":"b"}}}"#,
        br#"{"metadata":null,"spec":[],"status":7}"#,
        br#"[{"op":"replace","path":"/metadata/name","value":5}]"#,
        br#"{"spec":{"taints":[null,1,"x",{"key":[]}]}}"#,
        br#"{"$patch":"delete"}"#,
        br#"{"metadata":{"resourceVersion":{}}}"#,
        b"\xff\xfe\x00garbage",
        b"metadata: {name: [",
    ];
    for i in 0..400 {
        let method = rng.pick(&methods);
        let path = format!("{}{}", rng.pick(&paths), rng.pick(&queries));
        let ct = rng.pick(&types);
        let body = if i % 3 == 0 {
            let n = (rng.next() % 200) as usize;
            rng.bytes(n)
        } else {
            fragments[(rng.next() % fragments.len() as u64) as usize].to_vec()
        };
        let r = raw(&sim, method, &path, Some(ct), &body).await;
        assert!(
            r.status < 500 || r.status == 504,
            "{method} {path}: {}",
            r.status
        );
    }
    let r = raw(&sim, "GET", "/api/v1/nodes", None, b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        common::names(&r.json()).len() + count_deleted(&sim),
        12 + count_created(&sim)
    );
    sim.shutdown().await;
}

/// Successful node deletes and creates in the request log, to check the store stayed sane.
fn count_deleted(sim: &kube_sim::KubeSim) -> usize {
    sim.requests()
        .iter()
        .filter(|r| {
            r.method == "DELETE"
                && r.path.starts_with("/api/v1/nodes/")
                && !r.path.contains("dryRun")
                && r.status == 200
        })
        .count()
}

fn count_created(sim: &kube_sim::KubeSim) -> usize {
    sim.requests()
        .iter()
        .filter(|r| {
            r.method == "POST"
                && r.path.starts_with("/api/v1/nodes")
                && !r.path.contains("dryRun")
                && r.status == 201
        })
        .count()
}

#[tokio::test]
async fn broken_http_is_refused_and_serving_continues() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sim = sim().await;
    let mut rng = Rng(42);
    let mut junk: Vec<Vec<u8>> = vec![
        b"GARBAGE\r\n\r\n".to_vec(),
        b"GET /api/v1/nodes HTTP/9.9\r\n\r\n".to_vec(),
        b"GET /api/v1/nodes HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n".to_vec(),
        b"POST /api/v1/nodes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
            .to_vec(),
        [
            b"GET /".as_slice(),
            &vec![b'a'; 70_000],
            b" HTTP/1.1\r\n\r\n",
        ]
        .concat(),
    ];
    for _ in 0..20 {
        let n = (rng.next() % 300) as usize;
        junk.push(rng.bytes(n));
    }
    for bytes in junk {
        let mut s = tokio::net::TcpStream::connect(sim.address()).await.unwrap();
        // The server may close early; write and read errors are fine, hangs are not.
        let _ = s.write_all(&bytes).await;
        let _ = s.shutdown().await;
        let mut buf = Vec::new();
        let read =
            tokio::time::timeout(std::time::Duration::from_secs(30), s.read_to_end(&mut buf)).await;
        assert!(read.is_ok(), "the server answered or closed within 30 s");
    }
    let r = raw(&sim, "GET", "/api/v1/nodes", None, b"").await;
    assert_eq!(common::names(&r.json()).len(), 12);
    sim.shutdown().await;
}
