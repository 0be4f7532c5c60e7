//! The processes of a run: a node's backend (`member`), the LB's probe engine's prober
//! (`prober`) and the load generator (`client`). The bench binary runs them as hidden
//! subcommands, inside a namespace with `ip netns exec` (kernel realisation) or on loopback
//! (user-space realisation). They print JSON lines on stdout; times are Unix seconds.

use crate::model::ProbeOutcome;
use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::timeout;

pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn print_json<T: Serialize>(v: &T) {
    if let Ok(s) = serde_json::to_string(v) {
        println!("{s}");
    }
}

// ---------------------------------------------------------------- member

/// A node: the Service port (one line per request, the answer is the member id; `STREAM`
/// sends the id every 200 ms), kube-proxy's `/healthz` and the Service's
/// `healthCheckNodePort`. Commands on stdin: `kep503` (deletionTimestamp / CA taint),
/// `local-terminating`, `local-exit`.
pub async fn member(
    id: usize,
    bind: &str,
    service: u16,
    healthz: u16,
    hcnp: u16,
) -> anyhow::Result<()> {
    let svc = TcpListener::bind((bind, service))
        .await
        .context("service port")?;
    let hz = TcpListener::bind((bind, healthz))
        .await
        .context("healthz port")?;
    let hc = TcpListener::bind((bind, hcnp)).await.context("hcnp port")?;
    let ports = [
        svc.local_addr()?.port(),
        hz.local_addr()?.port(),
        hc.local_addr()?.port(),
    ];
    let kep_bad = Arc::new(AtomicBool::new(false));
    let local_bad = Arc::new(AtomicBool::new(false));
    let (exit_tx, exit_rx) = watch::channel(false);
    for (l, flag) in [(hz, kep_bad.clone()), (hc, local_bad.clone())] {
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let bad = flag.load(Ordering::SeqCst);
                tokio::spawn(http_answer(s, bad));
            }
        });
    }
    let mut exit_accept = exit_rx.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                a = svc.accept() => {
                    let Ok((s, _)) = a else { break };
                    tokio::spawn(serve(s, id, exit_rx.clone()));
                }
                _ = exit_accept.changed() => break, // the listener is dropped: pods gone
            }
        }
    });
    println!(
        "{{\"ready\":{id},\"ports\":[{},{},{}]}}",
        ports[0], ports[1], ports[2]
    );
    // stdin through a thread (tokio's io-std feature is not in the workspace's set).
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for l in std::io::stdin().lock().lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    while let Some(l) = rx.recv().await {
        match l.trim() {
            "kep503" => kep_bad.store(true, Ordering::SeqCst),
            "local-terminating" => local_bad.store(true, Ordering::SeqCst),
            "local-exit" => {
                local_bad.store(true, Ordering::SeqCst);
                let _ = exit_tx.send(true);
            }
            _ => {}
        }
    }
    Ok(())
}

async fn http_answer(mut s: TcpStream, bad: bool) {
    let mut buf = [0u8; 1024];
    let _ = timeout(Duration::from_secs(2), s.read(&mut buf)).await;
    let body = if bad {
        "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    } else {
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    };
    let _ = s.write_all(body.as_bytes()).await;
    let _ = s.shutdown().await;
}

async fn serve(s: TcpStream, id: usize, mut exit: watch::Receiver<bool>) {
    let (r, mut w) = s.into_split();
    let mut lines = BufReader::new(r).lines();
    let answer = format!("{id}\n");
    loop {
        tokio::select! {
            l = lines.next_line() => {
                match l {
                    Ok(Some(l)) if l.trim() == "STREAM" => loop {
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_millis(200)) => {
                                if w.write_all(answer.as_bytes()).await.is_err() { return; }
                            }
                            _ = exit.changed() => return,
                        }
                    },
                    Ok(Some(_)) => {
                        if w.write_all(answer.as_bytes()).await.is_err() { return; }
                    }
                    _ => return,
                }
            }
            _ = exit.changed() => return, // the pod exits: its sockets close
        }
    }
}

// ---------------------------------------------------------------- prober

/// One probed entry: `member,ip:port,kind,phase` with kind `tcp` or `http`.
#[derive(Debug, Clone)]
pub struct ProbeTarget {
    pub member: usize,
    pub addr: SocketAddr,
    pub http: bool,
    pub phase: f64,
}

impl std::str::FromStr for ProbeTarget {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        let p: Vec<&str> = s.split(',').collect();
        anyhow::ensure!(p.len() == 4, "member,ip:port,tcp|http,phase");
        Ok(ProbeTarget {
            member: p[0].parse()?,
            addr: p[1].parse()?,
            http: p[2] == "http",
            phase: p[3].parse()?,
        })
    }
}

impl std::fmt::Display for ProbeTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = if self.http { "http" } else { "tcp" };
        write!(f, "{},{},{},{}", self.member, self.addr, k, self.phase)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbeLine {
    pub member: usize,
    pub sent: f64,
    pub outcome: String,
}

pub fn outcome_name(o: ProbeOutcome) -> &'static str {
    match o {
        ProbeOutcome::Ok => "ok",
        ProbeOutcome::HttpNon200 => "non200",
        ProbeOutcome::Reset => "reset",
        ProbeOutcome::Timeout => "timeout",
    }
}

pub fn outcome_parse(s: &str) -> ProbeOutcome {
    match s {
        "ok" => ProbeOutcome::Ok,
        "non200" => ProbeOutcome::HttpNon200,
        "reset" => ProbeOutcome::Reset,
        _ => ProbeOutcome::Timeout,
    }
}

/// Probe every target every `interval` from its phase; a probe times out after `tmo`
/// (TCP: the interval, "fails when the next probe is sent"; HTTP: min(I, 30 s)).
pub async fn prober(
    targets: Vec<ProbeTarget>,
    interval: f64,
    http_timeout: f64,
) -> anyhow::Result<()> {
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for t in targets {
        tasks.push(tokio::spawn(async move {
            let mut next = start + Duration::from_secs_f64(t.phase);
            loop {
                tokio::time::sleep_until(next).await;
                next += Duration::from_secs_f64(interval);
                let t2 = t.clone();
                let tmo = if t.http { http_timeout } else { interval };
                tokio::spawn(async move {
                    let sent = now();
                    let o = probe_once(&t2, tmo).await;
                    print_json(&ProbeLine {
                        member: t2.member,
                        sent,
                        outcome: outcome_name(o).to_string(),
                    });
                });
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}

async fn probe_once(t: &ProbeTarget, tmo: f64) -> ProbeOutcome {
    let d = Duration::from_secs_f64(tmo);
    let fut = async {
        let mut s = match TcpStream::connect(t.addr).await {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return ProbeOutcome::Reset;
            }
            Err(_) => return ProbeOutcome::Timeout,
        };
        if !t.http {
            return ProbeOutcome::Ok;
        }
        let req = format!(
            "GET /healthz HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            t.addr
        );
        if s.write_all(req.as_bytes()).await.is_err() {
            return ProbeOutcome::Reset;
        }
        let mut buf = Vec::new();
        match s.read_to_end(&mut buf).await {
            Ok(_) if buf.starts_with(b"HTTP/1.1 200") => ProbeOutcome::Ok,
            Ok(_) => ProbeOutcome::HttpNon200,
            Err(_) => ProbeOutcome::Reset,
        }
    };
    timeout(d, fut).await.unwrap_or(ProbeOutcome::Timeout)
}

// ---------------------------------------------------------------- client

#[derive(Debug, Clone)]
pub struct ClientArgs {
    pub target: SocketAddr,
    pub new_per_sec: f64,
    pub pool: usize,
    pub pool_max_age: f64,
    pub pool_every: f64,
    pub streams: usize,
    pub connect_timeout: f64,
    pub request_timeout: f64,
    pub duration: f64,
}

/// One client-side event. `kind`: `new` (steady new connection, one request), `reconnect`
/// (a pool or stream connection being opened), `pool`, `stream` (an established flow broke).
/// `outcome`: `ok`, `connect_timeout`, `refused`, `reset`, `hung`, `eof`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientEvent {
    pub t: f64,
    pub kind: String,
    pub outcome: String,
    pub member: Option<usize>,
}

fn emit(kind: &str, outcome: &str, t: f64, member: Option<usize>) {
    print_json(&ClientEvent {
        t,
        kind: kind.to_string(),
        outcome: outcome.to_string(),
        member,
    });
}

async fn connect(target: SocketAddr, tmo: f64) -> Result<TcpStream, &'static str> {
    match timeout(Duration::from_secs_f64(tmo), TcpStream::connect(target)).await {
        Err(_) => Err("connect_timeout"),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Err("refused"),
        Ok(Err(_)) => Err("reset"),
        Ok(Ok(s)) => Ok(s),
    }
}

fn io_outcome(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe => "reset",
        _ => "reset",
    }
}

/// Send one line, read one answer line within the request timeout.
async fn request(
    lines: &mut tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>,
    w: &mut tokio::net::tcp::OwnedWriteHalf,
    tmo: f64,
) -> Result<usize, &'static str> {
    if let Err(e) = w.write_all(b"REQ\n").await {
        return Err(io_outcome(&e));
    }
    match timeout(Duration::from_secs_f64(tmo), lines.next_line()).await {
        Err(_) => Err("hung"),
        Ok(Err(e)) => Err(io_outcome(&e)),
        Ok(Ok(None)) => Err("eof"),
        Ok(Ok(Some(l))) => l.trim().parse().map_err(|_| "eof"),
    }
}

pub async fn client(a: ClientArgs) -> anyhow::Result<()> {
    let end = tokio::time::Instant::now() + Duration::from_secs_f64(a.duration);
    let a = Arc::new(a);
    let mut tasks = Vec::new();
    // Steady new connections, one request each.
    {
        let a = a.clone();
        tasks.push(tokio::spawn(async move {
            if a.new_per_sec <= 0.0 {
                return;
            }
            let every = Duration::from_secs_f64(1.0 / a.new_per_sec);
            let mut next = tokio::time::Instant::now();
            // New connections stop early enough for the last one to be judged.
            let stop = end - Duration::from_secs_f64(a.connect_timeout + a.request_timeout);
            while next < stop {
                tokio::time::sleep_until(next).await;
                next += every;
                let a = a.clone();
                tokio::spawn(async move {
                    let t = now();
                    match connect(a.target, a.connect_timeout).await {
                        Err(o) => emit("new", o, t, None),
                        Ok(s) => {
                            let (r, mut w) = s.into_split();
                            let mut lines = BufReader::new(r).lines();
                            match request(&mut lines, &mut w, a.request_timeout).await {
                                Ok(m) => emit("new", "ok", t, Some(m)),
                                Err(o) => emit("new", o, t, None),
                            }
                        }
                    }
                });
            }
        }));
    }
    // Keep-alive pools: one request every pool_every, recycled at max age (staggered).
    for k in 0..a.pool {
        let a = a.clone();
        tasks.push(tokio::spawn(async move {
            let mut first_age = a.pool_max_age * (k as f64 + 1.0) / a.pool as f64;
            while tokio::time::Instant::now() < end {
                let t = now();
                let s = match connect(a.target, a.connect_timeout).await {
                    Ok(s) => s,
                    Err(o) => {
                        emit("reconnect", o, t, None);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let age_end = tokio::time::Instant::now() + Duration::from_secs_f64(first_age);
                first_age = a.pool_max_age;
                let (r, mut w) = s.into_split();
                let mut lines = BufReader::new(r).lines();
                let mut member = None;
                while tokio::time::Instant::now() < age_end.min(end) {
                    let t = now();
                    match request(&mut lines, &mut w, a.request_timeout).await {
                        Ok(m) => member = Some(m),
                        // The first request failed: the flow never worked (a user-space proxy
                        // completes handshakes itself): a failed new connection.
                        Err(o) if member.is_none() => {
                            emit("reconnect", o, t, None);
                            break;
                        }
                        Err(o) => {
                            emit("pool", o, t, member);
                            break;
                        }
                    }
                    tokio::time::sleep(Duration::from_secs_f64(a.pool_every)).await;
                }
            }
        }));
    }
    // Long-lived streams: the server sends every 200 ms; silence for the request timeout = hung.
    for _ in 0..a.streams {
        let a = a.clone();
        tasks.push(tokio::spawn(async move {
            while tokio::time::Instant::now() < end {
                let t = now();
                let s = match connect(a.target, a.connect_timeout).await {
                    Ok(s) => s,
                    Err(o) => {
                        emit("reconnect", o, t, None);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (r, mut w) = s.into_split();
                let mut lines = BufReader::new(r).lines();
                if w.write_all(b"STREAM\n").await.is_err() {
                    emit("stream", "reset", t, None);
                    continue;
                }
                let mut member = None;
                let mut last = now();
                loop {
                    let left = end.saturating_duration_since(tokio::time::Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    let wait = Duration::from_secs_f64(a.request_timeout).min(left);
                    match timeout(wait, lines.next_line()).await {
                        Err(_) if wait < Duration::from_secs_f64(a.request_timeout) => break,
                        Err(_) if member.is_none() => {
                            emit("reconnect", "hung", last, None);
                            break;
                        }
                        Err(_) => {
                            emit("stream", "hung", last, member);
                            break;
                        }
                        Ok(Ok(Some(l))) => {
                            member = l.trim().parse().ok();
                            last = now();
                        }
                        Ok(Ok(None)) => {
                            emit("stream", "eof", last, member);
                            break;
                        }
                        Ok(Err(e)) => {
                            emit("stream", io_outcome(&e), last, member);
                            break;
                        }
                    }
                }
            }
        }));
    }
    tokio::time::sleep_until(end).await;
    for t in tasks {
        t.abort();
    }
    // Let the last new connections report.
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!("{{\"done\":true}}");
    Ok(())
}
