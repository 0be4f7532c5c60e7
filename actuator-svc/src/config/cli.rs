//! Command-line flags; every flag has an `ACTUATOR_*` environment fallback.

use crate::identity::{self, Allowed};
use crate::writer::Strategy;
use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Parses `500ms`, `20s`, `5m`, `1h` or plain seconds ([`cutover_runtime::duration::parse`]),
/// refusing in actuator-svc's words.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    use cutover_runtime::duration::{DurationError, parse};
    let text = s.trim();
    parse(s).map_err(|e| match e {
        DurationError::NotANumber => format!("{text:?} is not a duration (e.g. 500ms, 20s, 5m)"),
        DurationError::Unit(unit) => format!("unknown unit {unit:?} in {text:?} (ms, s, m, h)"),
        DurationError::NotFinite => format!("{text:?} is not a valid duration"),
    })
}

/// Parses a read interval: at least 10 ms (zero would read an LB in a busy loop).
pub fn parse_poll_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(10) {
        return Err(format!("{s:?} is too short (at least 10ms)"));
    }
    Ok(d)
}

/// Parses `--max-down-share`: a share in (0, 1].
pub fn parse_share(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number (e.g. 0.5)"))?;
    crate::plan::guard::Guard::new(v).map(|g| g.share())
}

/// Parses a positive rate per second.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive rate per second")),
    }
}

/// Parses a byte size: `24Mi`, `512Ki`, `1Gi` or plain bytes.
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, mult) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => {
            let (n, unit) = t.split_at(i);
            let m = match unit {
                "Ki" => 1 << 10,
                "Mi" => 1 << 20,
                "Gi" => 1 << 30,
                other => return Err(format!("unknown unit {other:?} in {s:?} (Ki, Mi, Gi)")),
            };
            (n, m)
        }
        None => (t, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{s:?} is not a size (e.g. 24Mi)"))
}

/// Parses `--lb-read-budget`: at least 1 MiB (a smaller budget would only serialise reads of
/// even small load balancers).
pub fn parse_read_budget(s: &str) -> Result<usize, String> {
    match parse_bytes(s)? {
        n if n >= 1 << 20 => Ok(n),
        _ => Err(format!("{s:?} is below the minimum of 1Mi")),
    }
}

/// Log output format (moved to `cutover_runtime`).
pub use cutover_runtime::log::LogFormat;

/// actuator-svc flags.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "actuator-svc",
    version,
    about = "Writes Azure Load Balancer backend admin states for cutover",
    args_override_self = true
)]
pub struct Args {
    /// cloud-provider-azure azure.json.
    #[arg(long, env = "ACTUATOR_CLOUD_CONFIG")]
    pub cloud_config: PathBuf,
    /// The cluster name the load balancers are named after.
    #[arg(long, env = "ACTUATOR_CLUSTER_NAME", default_value = "kubernetes")]
    pub cluster_name: String,
    /// ARM endpoint (default: the one of azure.json's `cloud`, e.g. https://management.azure.com).
    #[arg(long, env = "ACTUATOR_ARM_ENDPOINT")]
    pub arm_endpoint: Option<url::Url>,
    /// Entra ID (Azure AD) authority host (default: the one of azure.json's `cloud`; without a
    /// `cloud` field, AZURE_AUTHORITY_HOST, else the public cloud's).
    #[arg(long, env = "ACTUATOR_AAD_AUTHORITY")]
    pub aad_authority: Option<url::Url>,
    /// Token scope for ARM (default: azure.json's `cloud` ARM endpoint + `/.default`, e.g.
    /// https://management.chinacloudapi.cn/.default).
    #[arg(long, env = "ACTUATOR_ARM_TOKEN_SCOPE")]
    pub arm_token_scope: Option<String>,
    /// Extra CA certificates (PEM) to trust for ARM, Azure AD and managed identity, added to
    /// the built-in Mozilla roots and the platform's store (which honours SSL_CERT_FILE): a
    /// private cloud, a TLS-inspecting proxy.
    #[arg(long, env = "ACTUATOR_AZURE_CA_FILE")]
    pub azure_ca_file: Option<PathBuf>,
    /// gRPC listen address.
    #[arg(long, env = "ACTUATOR_GRPC_LISTEN", default_value = "0.0.0.0:9443")]
    pub grpc_listen: SocketAddr,
    /// Admin HTTP listen address (/live, /ready, /metrics).
    #[arg(long, env = "ACTUATOR_ADMIN_LISTEN", default_value = "0.0.0.0:9091")]
    pub admin_listen: SocketAddr,
    /// This replica's name (reported to clients).
    #[arg(long, env = "POD_NAME", default_value = "actuator-svc")]
    pub identity: String,
    /// Maximum age of cached pools before a write re-reads them.
    #[arg(long, env = "ACTUATOR_POOL_REFRESH_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    pub pool_refresh_interval: Duration,
    /// An ARM operation still Updating this long is reported as FAILED (will retry) for the
    /// nodes waiting on it, with a metric; tracking goes on.
    #[arg(long, env = "ACTUATOR_OPERATION_SLOW_AFTER", default_value = "60s", value_parser = parse_duration)]
    pub operation_slow_after: Duration,
    /// The actuator is used without signal-svc: a tool hold is kept in this replica's memory
    /// (every answer says so). Without it (a fleet), a hold with no signal-svc stream waits
    /// for one and is refused as retryable: never kept where no other replica sees it, since
    /// it would make this replica write load balancers another one owns.
    #[arg(long, env = "ACTUATOR_STANDALONE")]
    pub standalone: bool,
    /// How often pools are re-read and drifted entries repaired.
    #[arg(long, env = "ACTUATOR_SELF_HEAL_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub self_heal_interval: Duration,
    /// One PUT per changed pool, or one PUT of the whole LB (default: the benchmark winner).
    #[arg(
        long,
        env = "ACTUATOR_WRITE_STRATEGY",
        value_enum,
        default_value = "whole-lb"
    )]
    pub write_strategy: Strategy,
    /// Read the configured subscription, print what cutover would manage and what it cannot,
    /// and exit (non-zero when something blocks a cut). Reads only; binds no port.
    #[arg(long, env = "ACTUATOR_PREFLIGHT")]
    pub preflight: bool,
    /// With --preflight: also PUT each managed load balancer back exactly as read with an
    /// If-Match no etag has. ARM checks roles, deny assignments (AKS's node resource group
    /// lockdown) and linked access first; the resource provider then refuses it with 412 and
    /// nothing changes. Proves what the permissions API cannot show.
    #[arg(long, env = "ACTUATOR_PREFLIGHT_WRITE_PROBE")]
    pub preflight_write_probe: bool,
    /// The service's own access check (the preflight's permissions check, read-only, in the
    /// background): at start, then this often, and for a load balancer whose write was just
    /// refused for access. Logs each missing action with its scope and fix, and sets
    /// cutover_actuator_missing_permission(s). 0: never.
    #[arg(long, env = "ACTUATOR_ACCESS_CHECK_INTERVAL", default_value = "30m", value_parser = parse_duration)]
    pub access_check_interval: Duration,
    /// Resolve and log writes without making them.
    #[arg(long, env = "ACTUATOR_DRY_RUN")]
    pub dry_run: bool,
    #[arg(long, env = "ACTUATOR_LOG_FORMAT", value_enum, default_value = "plain")]
    pub log_format: LogFormat,
    /// Time allowed for in-flight writes on SIGTERM.
    #[arg(long, env = "ACTUATOR_SHUTDOWN_GRACE", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Timeout of one ARM request.
    #[arg(long, env = "ACTUATOR_ARM_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub arm_timeout: Duration,
    /// While an operation runs on a load balancer, read its provisioningState this often to
    /// see its end at once (from the start when its duration is unknown; otherwise outside
    /// the fine window); slower when the read budget runs low. The operation URL itself is
    /// never polled faster than ARM's Retry-After.
    #[arg(long, env = "ACTUATOR_POLL_INTERVAL", default_value = "150ms", value_parser = parse_poll_interval)]
    pub poll_interval: Duration,
    /// The read interval around the moment the LB's recent operations ended (from one fine
    /// step before the shortest of the last five durations to 400 ms after it).
    #[arg(long, env = "ACTUATOR_POLL_FINE_INTERVAL", default_value = "50ms", value_parser = parse_poll_interval)]
    pub poll_fine_interval: Duration,
    /// Most bytes of whole load balancer documents read or held for a write at once (a
    /// 5,000-node LB is ~16 MB). With many LBs in flight, reads wait for room instead of
    /// growing memory; one document larger than this is read alone.
    #[arg(long, env = "ACTUATOR_LB_READ_BUDGET", default_value = "24Mi", value_parser = parse_read_budget)]
    pub lb_read_budget: usize,
    /// Most bytes of LB documents kept between writes as the base of the next one (saves a
    /// GET before the first write on an idle LB); least recently written are dropped first.
    /// 0 keeps none.
    #[arg(long, env = "ACTUATOR_BASE_CACHE_BUDGET", default_value = "16Mi", value_parser = parse_bytes)]
    pub base_cache_budget: usize,
    /// Serving certificate (PEM). With --tls-key and --tls-client-ca: mutual TLS, required
    /// unless --insecure-plaintext.
    #[arg(long, env = "ACTUATOR_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// Serving key (PEM).
    #[arg(long, env = "ACTUATOR_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// CA (PEM) that signs client certificates: every caller must present one.
    #[arg(long, env = "ACTUATOR_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,
    /// Client identities allowed to open the desired-state stream: SAN URIs
    /// (spiffe://cluster.local/ns/cutover/sa/signal-svc) or DNS names, matched exactly; the
    /// certificate's CN is never an identity. Required unless --standalone.
    #[arg(long, env = "ACTUATOR_SIGNAL_CLIENTS", value_delimiter = ',')]
    pub signal_clients: Vec<String>,
    /// Serve gRPC in plaintext, without TLS or client authentication: any caller that reaches
    /// the port may drive the fleet. For tests and local experiments only; logged as a warning
    /// at start and shown by cutover_actuator_insecure_plaintext 1.
    #[arg(
        long,
        env = "ACTUATOR_INSECURE_PLAINTEXT",
        conflicts_with_all = ["tls_cert", "tls_key", "tls_client_ca", "signal_clients", "tool_clients"]
    )]
    pub insecure_plaintext: bool,
    /// The most of a pool's entries held Down at once (blast-radius guard): nodes over it are
    /// left to the health probe and reported (FAILED, will retry) until held nodes are
    /// restored; the first signalled are cut first. 1.0 lets every entry go Down.
    #[arg(long, env = "ACTUATOR_MAX_DOWN_SHARE", default_value_t = crate::plan::guard::DEFAULT_MAX_DOWN_SHARE, value_parser = parse_share)]
    pub max_down_share: f64,
    /// Tool RPCs (Set, Get, List) per second per client identity; more get RESOURCE_EXHAUSTED.
    #[arg(long, env = "ACTUATOR_TOOL_RATE", default_value_t = 10.0, value_parser = parse_rate)]
    pub tool_rate: f64,
    /// Burst of tool RPCs per client identity.
    #[arg(long, env = "ACTUATOR_TOOL_BURST", default_value_t = 20)]
    pub tool_burst: u32,
    /// Tool requests for nodes with no backend entry re-read the pools at most this often;
    /// in between they are answered from the negative cache without ARM calls.
    #[arg(long, env = "ACTUATOR_UNKNOWN_NODE_REFRESH", default_value = "5s", value_parser = parse_duration)]
    pub unknown_node_refresh: Duration,
    /// Client identities allowed to call the tool RPCs (cutoverctl): SAN URIs or DNS names,
    /// matched exactly, never the CN. Empty: no tool may call.
    #[arg(long, env = "ACTUATOR_TOOL_CLIENTS", value_delimiter = ',')]
    pub tool_clients: Vec<String>,
}

/// How the gRPC port is served, from the TLS flags.
#[derive(Debug, Clone)]
pub enum Serving {
    /// Mutual TLS: the files, and the identities each group of RPCs admits.
    Mtls {
        cert: PathBuf,
        key: PathBuf,
        client_ca: PathBuf,
        signal: Vec<Allowed>,
        tool: Vec<Allowed>,
    },
    /// `--insecure-plaintext`: no TLS, no client authentication.
    InsecurePlaintext,
}

impl Args {
    /// The gRPC transport the flags ask for: mutual TLS with every file and the allow-lists, or
    /// plaintext only when `--insecure-plaintext` says so. Errors name the flags.
    pub fn serving(&self) -> Result<Serving, String> {
        if self.insecure_plaintext {
            return Ok(Serving::InsecurePlaintext);
        }
        let (Some(cert), Some(key), Some(client_ca)) =
            (&self.tls_cert, &self.tls_key, &self.tls_client_ca)
        else {
            let missing: Vec<&str> = [
                ("--tls-cert", self.tls_cert.is_none()),
                ("--tls-key", self.tls_key.is_none()),
                ("--tls-client-ca", self.tls_client_ca.is_none()),
            ]
            .iter()
            .filter(|(_, m)| *m)
            .map(|(f, _)| *f)
            .collect();
            return Err(format!(
                "gRPC is served with mutual TLS: --tls-cert, --tls-key and --tls-client-ca are required (missing {}); \
                 --insecure-plaintext serves plaintext without client authentication (tests only)",
                missing.join(", ")
            ));
        };
        let signal = identity::parse_list("--signal-clients", &self.signal_clients)?;
        let tool = identity::parse_list("--tool-clients", &self.tool_clients)?;
        if signal.is_empty() && !self.standalone {
            return Err("--signal-clients is empty: name signal-svc's certificate identity (a SAN URI \
                        such as spiffe://cluster.local/ns/cutover/sa/signal-svc, or a DNS name), or pass \
                        --standalone for an actuator used without signal-svc"
                .into());
        }
        Ok(Serving::Mtls {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: client_ca.clone(),
            signal,
            tool,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flags_are_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn byte_budgets() {
        assert_eq!(parse_bytes("24Mi"), Ok(24 << 20));
        assert_eq!(parse_bytes("512Ki"), Ok(512 << 10));
        assert_eq!(parse_bytes("0"), Ok(0));
        assert!(parse_bytes("24MB").is_err());
        assert!(parse_bytes("lots").is_err());
        assert!(parse_read_budget("512Ki").is_err());
        let d = Args::try_parse_from(["actuator-svc", "--cloud-config", "x"]).unwrap();
        assert_eq!(
            (d.lb_read_budget, d.base_cache_budget),
            (24 << 20, 16 << 20)
        );
        let bad = Args::try_parse_from([
            "actuator-svc",
            "--cloud-config",
            "x",
            "--lb-read-budget",
            "100Ki",
        ]);
        assert!(bad.is_err());
    }

    /// The texts are `cutover_runtime::duration`'s (tested there); the refusals are worded here.
    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert_eq!(
            parse_duration("soon"),
            Err(r#""soon" is not a duration (e.g. 500ms, 20s, 5m)"#.into())
        );
        assert_eq!(
            parse_duration(" 5d"),
            Err(r#"unknown unit "d" in "5d" (ms, s, m, h)"#.into())
        );
    }

    #[test]
    fn read_intervals_refuse_a_busy_loop_and_name_the_flag() {
        let d = Args::try_parse_from(["actuator-svc", "--cloud-config", "x"]).unwrap();
        assert_eq!(
            (d.poll_interval, d.poll_fine_interval),
            (Duration::from_millis(150), Duration::from_millis(50))
        );
        let err = Args::try_parse_from([
            "actuator-svc",
            "--cloud-config",
            "x",
            "--poll-fine-interval",
            "0ms",
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("--poll-fine-interval") && err.contains("at least 10ms"),
            "{err}"
        );
    }

    #[test]
    fn guard_and_tool_limits() {
        let d = Args::try_parse_from(["actuator-svc", "--cloud-config", "x"]).unwrap();
        assert_eq!(d.max_down_share, 0.5);
        assert_eq!((d.tool_rate, d.tool_burst), (10.0, 20));
        assert_eq!(d.unknown_node_refresh, Duration::from_secs(5));
        for bad in ["0", "1.5", "-1", "half"] {
            let r = Args::try_parse_from([
                "actuator-svc",
                "--cloud-config",
                "x",
                "--max-down-share",
                bad,
            ]);
            assert!(r.is_err(), "{bad}");
        }
        assert!(parse_rate("0").is_err());
        assert_eq!(parse_share("1.0"), Ok(1.0));
    }

    #[test]
    fn mutual_tls_or_an_explicit_plaintext_flag() {
        let parse = |extra: &[&str]| {
            let mut v = vec!["actuator-svc", "--cloud-config", "x"];
            v.extend_from_slice(extra);
            Args::try_parse_from(v)
        };
        // No TLS flags: refused when serving, naming every flag and the way out.
        let e = parse(&[]).unwrap().serving().unwrap_err();
        for f in [
            "--tls-cert",
            "--tls-key",
            "--tls-client-ca",
            "--insecure-plaintext",
        ] {
            assert!(e.contains(f), "{f}: {e}");
        }
        let e = parse(&[
            "--tls-cert",
            "c",
            "--tls-key",
            "k",
            "--signal-clients",
            "a.b",
        ])
        .unwrap()
        .serving()
        .unwrap_err();
        assert!(e.contains("missing --tls-client-ca"), "{e}");
        assert!(matches!(
            parse(&["--insecure-plaintext"]).unwrap().serving(),
            Ok(Serving::InsecurePlaintext)
        ));
        // The flag excludes TLS and allow-lists.
        assert!(parse(&["--insecure-plaintext", "--tls-cert", "c"]).is_err());
        assert!(parse(&["--insecure-plaintext", "--tool-clients", "t.example"]).is_err());
        let tls = ["--tls-cert", "c", "--tls-key", "k", "--tls-client-ca", "ca"];
        let mut ok = tls.to_vec();
        ok.extend([
            "--signal-clients",
            "spiffe://cluster.local/ns/cutover/sa/signal-svc,b.example",
            "--tool-clients",
            "t.example",
            "--write-strategy",
            "per-pool",
        ]);
        let args = parse(&ok).unwrap();
        assert_eq!(args.write_strategy, Strategy::PerPool);
        let Ok(Serving::Mtls { signal, tool, .. }) = args.serving() else {
            panic!("not mTLS")
        };
        assert_eq!(
            signal,
            vec![
                Allowed::Uri("spiffe://cluster.local/ns/cutover/sa/signal-svc".into()),
                Allowed::Dns("b.example".into())
            ]
        );
        assert_eq!(tool, vec![Allowed::Dns("t.example".into())]);
        // signal-svc's identity is required in a fleet, not for --standalone.
        let e = parse(&tls).unwrap().serving().unwrap_err();
        assert!(e.contains("--signal-clients is empty"), "{e}");
        let mut standalone = tls.to_vec();
        standalone.push("--standalone");
        assert!(parse(&standalone).unwrap().serving().is_ok());
        let mut wild = tls.to_vec();
        wild.extend(["--signal-clients", "*.cutover.svc"]);
        let e = parse(&wild).unwrap().serving().unwrap_err();
        assert!(
            e.contains("--signal-clients") && e.contains("wildcard"),
            "{e}"
        );
    }
}
