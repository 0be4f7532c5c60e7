//! Command-line / environment configuration, validated before anything is bound or started.

use clap::{Args as ClapArgs, Parser};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use crate::config_error::ConfigError;
use crate::config_error::invalid;

/// signal-svc: watches Nodes and Spot notices, streams desired admin states to actuator-svc.
///
/// A flag given twice takes its last value (as actuator-svc does), so a later flag overrides
/// an earlier one, e.g. the chart's `signal.extraArgs` over the flags the chart renders; list
/// flags (`--actuator-endpoints`, `--extra-taint-keys`) add up instead.
#[derive(Clone, Debug, Parser)]
#[command(name = "signal-svc", version, about, args_override_self = true)]
pub struct Args {
    /// The cluster name the load balancers are named after (sent in every stream Hello).
    #[arg(long, env = "SIGNAL_CLUSTER_NAME")]
    pub cluster_name: String,

    /// Kubeconfig file; without it the in-cluster / default config is inferred.
    #[arg(long, env = "SIGNAL_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Namespace of the Lease (normally the pod's namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub namespace: String,

    /// This replica's identity in the Lease and in stream Hellos (defaults to the hostname).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    #[command(flatten)]
    pub lease: LeaseArgs,

    #[command(flatten)]
    pub actuator: ActuatorArgs,

    #[command(flatten)]
    pub tls: TlsArgs,

    #[command(flatten)]
    pub triggers: TriggerArgs,

    /// Extra taint keys that also mean "leaving" (comma-separated, any value, any effect), e.g.
    /// `example.com/decommission`. A key listed here counts even if its built-in is turned off.
    #[arg(long, env = "SIGNAL_EXTRA_TAINT_KEYS", value_delimiter = ',')]
    pub extra_taint_keys: Vec<String>,

    /// Admin HTTP address (`/live`, `/ready`, `/metrics`).
    #[arg(long, env = "SIGNAL_ADMIN_LISTEN", default_value = "0.0.0.0:9090")]
    pub admin_listen: SocketAddr,

    /// How long an actuator's load-balancer assignment holds without a heartbeat (sent every
    /// third of it). A dead replica's load balancers move after about this long.
    #[arg(long, env = "SIGNAL_ASSIGNMENT_VALID_FOR", default_value = "3s", value_parser = parse_duration)]
    pub assignment_valid_for: Duration,

    /// HTTP/2 keepalive interval and ack timeout on actuator channels: a hung replica
    /// (SIGSTOP, partition without RST) is detected within about twice this.
    #[arg(long, env = "SIGNAL_ACTUATOR_KEEPALIVE", default_value = "1s", value_parser = parse_duration)]
    pub actuator_keepalive: Duration,

    /// Period of the full re-send of every node's state on every stream (on the same
    /// stream: the replica keeps its load balancers).
    #[arg(long, env = "SIGNAL_RESYNC_INTERVAL", default_value = "5m", value_parser = parse_duration)]
    pub resync_interval: Duration,

    /// Log what would be tainted and sent; write and send nothing (no Lease either).
    #[arg(long, env = "SIGNAL_DRY_RUN")]
    pub dry_run: bool,

    /// Log format.
    #[arg(long, env = "SIGNAL_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,

    /// Upper bound for the graceful drain on SIGTERM.
    #[arg(long, env = "SIGNAL_SHUTDOWN_GRACE", default_value = "10s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
}

/// Leader election.
#[derive(Clone, Debug, ClapArgs)]
pub struct LeaseArgs {
    /// Name of the coordination.k8s.io/v1 Lease.
    #[arg(long, env = "SIGNAL_LEASE_NAME", default_value = "cutover-signal-svc")]
    pub lease_name: String,

    /// How long a Lease record must stay unchanged before a standby takes over (by the
    /// standby's own clock): the cost of a leader that dies without releasing. Sub-second
    /// precision is kept in an annotation (`leaseDurationSeconds` is whole seconds, rounded
    /// up). The defaults come from the measured table in the README (crash failover against
    /// the API latency tolerated).
    #[arg(long, env = "SIGNAL_LEASE_DURATION", default_value = "4s", value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// How long the leader keeps writing without a successful renewal (counted from the last
    /// success, client-go's renewDeadline); failed renewals in between are retried. Must be
    /// below --lease-duration: the gap is the safety margin against a standby taking over.
    #[arg(long, env = "SIGNAL_LEASE_RENEW_DEADLINE", default_value = "3s", value_parser = parse_duration)]
    pub lease_renew_deadline: Duration,

    /// How often the leader renews (and retries a failed renewal).
    #[arg(long, env = "SIGNAL_LEASE_RENEW_INTERVAL", default_value = "500ms", value_parser = parse_duration)]
    pub lease_renew_interval: Duration,

    /// How often a standby reads the Lease (a released Lease is taken within this).
    #[arg(long, env = "SIGNAL_LEASE_RETRY_INTERVAL", default_value = "250ms", value_parser = parse_duration)]
    pub lease_retry_interval: Duration,
}

/// Built-in triggers: the first four on by default (`--trigger-...=false` turns one off), the
/// two cordon-based ones off (`=true` turns one on).
#[derive(Clone, Debug, ClapArgs)]
pub struct TriggerArgs {
    /// Taint `karpenter.sh/disrupted` (any effect), set by Karpenter / AKS node
    /// auto-provisioning when it starts terminating a node.
    #[arg(long, env = "SIGNAL_TRIGGER_KARPENTER_DISRUPTED", default_value_t = true, action = clap::ArgAction::Set)]
    pub trigger_karpenter_disrupted: bool,

    /// Taint `ToBeDeletedByClusterAutoscaler`, set by cluster-autoscaler before it drains and
    /// deletes a node.
    #[arg(long, env = "SIGNAL_TRIGGER_CLUSTER_AUTOSCALER", default_value_t = true, action = clap::ArgAction::Set)]
    pub trigger_cluster_autoscaler: bool,

    /// Label `node.kubernetes.io/exclude-from-external-load-balancers`, read as the service
    /// controller reads it: a value that parses as a false boolean keeps the node in.
    #[arg(long, env = "SIGNAL_TRIGGER_EXCLUDE_LABEL", default_value_t = true, action = clap::ArgAction::Set)]
    pub trigger_exclude_label: bool,

    /// A Node with `metadata.deletionTimestamp` (reason `node-deleting`): it stays only while a
    /// finalizer holds it, e.g. Karpenter's during its drain. The service controller and
    /// kube-proxy's `/healthz` already treat it as gone.
    #[arg(long, env = "SIGNAL_TRIGGER_NODE_DELETING", default_value_t = true, action = clap::ArgAction::Set)]
    pub trigger_node_deleting: bool,

    /// Opt-in: a cordoned Node whose KEP-5683 condition `DrainInProgress` or `Drained` is
    /// `True` (alpha in Kubernetes 1.37; `kubectl drain` and maintenance controllers that
    /// adopt it set it). An uncordoned node's condition is stale and ignored.
    #[arg(long, env = "SIGNAL_TRIGGER_DRAIN_CONDITIONS", default_value_t = false, action = clap::ArgAction::Set)]
    pub trigger_drain_conditions: bool,

    /// Opt-in: every cordoned Node (reason `node-cordoned`), but one AKS labelled
    /// `kubernetes.azure.com/upgrade-status=Quarantined`. Only where a cordon always means the
    /// node is leaving, e.g. clusters where only AKS upgrades cordon: AKS node image and
    /// version upgrades cordon, drain and reimage and leave no other mark on the node.
    #[arg(long, env = "SIGNAL_TRIGGER_CORDON", default_value_t = false, action = clap::ArgAction::Set)]
    pub trigger_cordon: bool,
}

/// Where actuator-svc runs.
#[derive(Clone, Debug, ClapArgs)]
#[group(required = true, multiple = false)]
pub struct ActuatorArgs {
    /// Static endpoints, comma-separated `host:port` (or `http(s)://host:port`).
    #[arg(long, env = "SIGNAL_ACTUATOR_ENDPOINTS", value_delimiter = ',')]
    pub actuator_endpoints: Vec<String>,

    /// Headless Service `host:port`, re-resolved periodically; every address is one endpoint.
    #[arg(long, env = "SIGNAL_ACTUATOR_SERVICE")]
    pub actuator_service: Option<String>,
}

/// Period of DNS re-resolution of `--actuator-service`.
pub const RESOLVE_INTERVAL: Duration = Duration::from_secs(10);

/// mTLS towards actuator-svc.
#[derive(Clone, Debug, ClapArgs)]
pub struct TlsArgs {
    /// CA bundle (PEM) that signed the actuator's certificate.
    #[arg(long, env = "SIGNAL_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mTLS; its SAN must be on the actuators' --signal-clients.
    #[arg(long, env = "SIGNAL_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Client private key (PEM); requires `--tls-cert`.
    #[arg(long, env = "SIGNAL_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The actuator identity signal-svc trusts: a DNS name its certificate must carry as a
    /// subject alternative name, exactly (never the CN; default: the endpoint's host).
    #[arg(long, env = "SIGNAL_TLS_SERVER_NAME")]
    pub tls_server_name: Option<String>,
    /// Stream to the actuators in plaintext, without TLS or a client certificate: only an
    /// actuator started with --insecure-plaintext (tests) accepts it. Warned at start and shown
    /// by cutover_signal_insecure_plaintext 1. Without it, --tls-ca, --tls-cert and --tls-key
    /// are required.
    #[arg(
        long,
        env = "SIGNAL_INSECURE_PLAINTEXT",
        conflicts_with_all = ["tls_ca", "tls_cert", "tls_key", "tls_server_name"]
    )]
    pub insecure_plaintext: bool,
}

/// `--log-format` (moved to `cutover_runtime`).
pub use cutover_runtime::log::LogFormat;

/// How endpoints are discovered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Discovery {
    Static(Vec<String>),
    Service { host: String, port: u16 },
}

/// TLS material, read and checked at start-up and read again at every connect
/// (`cutover_runtime::tls_reload`'s client shape; tonic's settings: `tls_reload`).
#[derive(Clone, Debug)]
pub struct TlsMaterial {
    pub source: std::sync::Arc<cutover_runtime::tls_reload::ClientTls>,
    pub server_name: Option<String>,
}

/// Validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub cluster_name: String,
    pub kubeconfig: Option<PathBuf>,
    pub namespace: String,
    pub identity: String,
    pub lease_name: String,
    pub lease: crate::core::term::Timings,
    pub assignment_valid_for: Duration,
    pub actuator_keepalive: Duration,
    pub discovery: Discovery,
    pub resolve_interval: Duration,
    pub tls: Option<TlsMaterial>,
    pub extra_taint_keys: Vec<String>,
    /// Which built-in triggers are on.
    pub built_ins: crate::core::taints::BuiltIns,
    pub admin_listen: SocketAddr,
    pub resync_interval: Duration,
    pub dry_run: bool,
    pub log_format: LogFormat,
    pub shutdown_grace: Duration,
}

impl Args {
    /// Checks everything and reads the TLS files, before any port is bound. Checks run in
    /// flag order; the first failure is the error.
    pub fn validate(self) -> Result<Config, ConfigError> {
        check_names(&self)?;
        let identity = identity(self.identity)?;
        let lease = self.lease.validate()?;
        check_assignment(self.assignment_valid_for, self.actuator_keepalive)?;
        let discovery = self.actuator.validate()?;
        let tls = self.tls.validate()?;
        let extra_taint_keys = extra_taint_keys(self.extra_taint_keys)?;
        if self.resync_interval < Duration::from_secs(1) {
            return Err(invalid("resync-interval", "must be at least 1s"));
        }
        Ok(Config {
            cluster_name: self.cluster_name,
            kubeconfig: self.kubeconfig,
            namespace: self.namespace,
            identity,
            lease_name: self.lease.lease_name,
            lease,
            assignment_valid_for: self.assignment_valid_for,
            actuator_keepalive: self.actuator_keepalive,
            discovery,
            resolve_interval: RESOLVE_INTERVAL,
            tls,
            extra_taint_keys,
            built_ins: crate::core::taints::BuiltIns {
                karpenter_disrupted: self.triggers.trigger_karpenter_disrupted,
                cluster_autoscaler: self.triggers.trigger_cluster_autoscaler,
                exclude_label: self.triggers.trigger_exclude_label,
                node_deleting: self.triggers.trigger_node_deleting,
                drain_conditions: self.triggers.trigger_drain_conditions,
                cordon: self.triggers.trigger_cordon,
            },
            admin_listen: self.admin_listen,
            resync_interval: self.resync_interval,
            dry_run: self.dry_run,
            log_format: self.log_format,
            shutdown_grace: self.shutdown_grace,
        })
    }
}

/// A Kubernetes object name or identity as we accept it.
fn name_ok(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && !s.chars().any(char::is_whitespace)
}

fn check_names(args: &Args) -> Result<(), ConfigError> {
    if !name_ok(&args.cluster_name) {
        return Err(invalid(
            "cluster-name",
            "must be a non-empty name without spaces",
        ));
    }
    if !name_ok(&args.namespace) {
        return Err(invalid("namespace", "must be a non-empty name"));
    }
    if !name_ok(&args.lease.lease_name) {
        return Err(invalid("lease-name", "must be a non-empty name"));
    }
    Ok(())
}

/// `--identity`, else the host name.
fn identity(given: Option<String>) -> Result<String, ConfigError> {
    match given {
        Some(i) if name_ok(&i) => Ok(i),
        Some(_) => Err(invalid("identity", "must be non-empty, without spaces")),
        None => hostname()
            .ok_or_else(|| invalid("identity", "not set and no hostname found; set POD_NAME")),
    }
}

impl LeaseArgs {
    /// The election's timings, each bounded by the one it must fit in.
    fn validate(&self) -> Result<crate::core::term::Timings, ConfigError> {
        if self.lease_duration < Duration::from_secs(1) {
            return Err(invalid("lease-duration", "must be at least 1s"));
        }
        if self.lease_renew_deadline.is_zero()
            || self.lease_renew_deadline + Duration::from_millis(200) > self.lease_duration
        {
            return Err(invalid(
                "lease-renew-deadline",
                "must be > 0 and at least 200ms below --lease-duration",
            ));
        }
        if self.lease_renew_interval.is_zero()
            || self.lease_renew_interval * 2 > self.lease_renew_deadline
        {
            return Err(invalid(
                "lease-renew-interval",
                "must be > 0 and at most half of --lease-renew-deadline",
            ));
        }
        if self.lease_retry_interval.is_zero() || self.lease_retry_interval > self.lease_duration {
            return Err(invalid(
                "lease-retry-interval",
                "must be > 0 and at most --lease-duration",
            ));
        }
        Ok(crate::core::term::Timings {
            duration: self.lease_duration,
            renew_deadline: self.lease_renew_deadline,
            renew_interval: self.lease_renew_interval,
            retry_interval: self.lease_retry_interval,
        })
    }
}

/// `--assignment-valid-for` and `--actuator-keepalive`, which must fit within it.
fn check_assignment(valid_for: Duration, keepalive: Duration) -> Result<(), ConfigError> {
    if !(Duration::from_millis(300)..=Duration::from_secs(60)).contains(&valid_for) {
        return Err(invalid(
            "assignment-valid-for",
            "must be 300ms..60s (actuator-svc refuses a grant valid for more than 60s)",
        ));
    }
    if keepalive < Duration::from_millis(100) {
        return Err(invalid("actuator-keepalive", "must be at least 100ms"));
    }
    // The grant's heartbeat goes every third of --assignment-valid-for; a hung replica is
    // detected within about two keepalive rounds, which must fit within one grant.
    if keepalive * 2 >= valid_for {
        return Err(invalid(
            "actuator-keepalive",
            format!(
                "twice it ({:?}) must stay below --assignment-valid-for ({:?}): a hung \
                 replica must be detected within the grant",
                keepalive * 2,
                valid_for
            ),
        ));
    }
    Ok(())
}

impl ActuatorArgs {
    /// Exactly one of `--actuator-service` and `--actuator-endpoints`.
    fn validate(self) -> Result<Discovery, ConfigError> {
        match (self.actuator_service, self.actuator_endpoints) {
            (Some(svc), eps) if eps.is_empty() => {
                let (host, port) =
                    split_host_port(&svc).map_err(|r| invalid("actuator-service", r))?;
                Ok(Discovery::Service { host, port })
            }
            (None, eps) if !eps.is_empty() => static_endpoints(&eps).map(Discovery::Static),
            _ => Err(invalid(
                "actuator-endpoints",
                "give exactly one of --actuator-endpoints or --actuator-service",
            )),
        }
    }
}

/// `--actuator-endpoints` as `host:port`, without scheme or trailing slash.
fn static_endpoints(eps: &[String]) -> Result<Vec<String>, ConfigError> {
    let mut out = Vec::new();
    for e in eps.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        let bare = e
            .strip_prefix("http://")
            .or_else(|| e.strip_prefix("https://"))
            .unwrap_or(e);
        split_host_port(bare).map_err(|r| invalid("actuator-endpoints", format!("{e}: {r}")))?;
        out.push(bare.trim_end_matches('/').to_owned());
    }
    if out.is_empty() {
        return Err(invalid("actuator-endpoints", "no endpoint given"));
    }
    Ok(out)
}

impl TlsArgs {
    /// Mutual TLS, its files read now; no TLS only with `--insecure-plaintext`.
    fn validate(self) -> Result<Option<TlsMaterial>, ConfigError> {
        if self.insecure_plaintext {
            return Ok(None);
        }
        let (Some(ca), Some(cert), Some(key)) = (self.tls_ca, &self.tls_cert, &self.tls_key) else {
            return Err(invalid(
                "tls-ca",
                "the stream to the actuators is mutual TLS: --tls-ca, --tls-cert and --tls-key are \
                 required; --insecure-plaintext streams in plaintext without a client certificate \
                 (tests only)",
            ));
        };
        let identity = Some((cert.clone(), key.clone()));
        let source = cutover_runtime::tls_reload::ClientTls::load(
            cutover_runtime::tls_reload::ClientTlsFiles { ca, identity },
        )?;
        Ok(Some(TlsMaterial {
            source: std::sync::Arc::new(source),
            server_name: self.tls_server_name,
        }))
    }
}

/// `--extra-taint-keys`, trimmed, sorted, without duplicates.
fn extra_taint_keys(keys: Vec<String>) -> Result<Vec<String>, ConfigError> {
    let mut extra: Vec<String> = keys
        .into_iter()
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty())
        .collect();
    if let Some(bad) = extra
        .iter()
        .find(|k| k.chars().any(|c| c.is_whitespace() || c == '=' || c == ':'))
    {
        return Err(invalid(
            "extra-taint-keys",
            format!("{bad:?} is not a taint key"),
        ));
    }
    extra.sort();
    extra.dedup();
    Ok(extra)
}

fn hostname() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}

fn split_host_port(s: &str) -> Result<(String, u16), String> {
    let (host, port) = s.rsplit_once(':').ok_or("expected host:port")?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err("empty host".into());
    }
    let port: u16 = port.parse().map_err(|_| format!("bad port {port:?}"))?;
    if port == 0 {
        return Err("port 0".into());
    }
    Ok((host.to_owned(), port))
}

/// Parses `500ms`, `2s`, `5m`, `1h` or a bare number of seconds
/// ([`cutover_runtime::duration::parse`]), refusing in signal-svc's words.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    use cutover_runtime::duration::{DurationError, parse};
    let text = s.trim();
    parse(s).map_err(|e| match e {
        DurationError::Unit(_) => format!("invalid duration unit in {text:?} (use ms, s, m, h)"),
        DurationError::NotANumber | DurationError::NotFinite => {
            format!("invalid duration {text:?}")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Args::command().debug_assert();
    }

    fn parse(extra: &[&str]) -> Result<Config, String> {
        let mut argv = vec![
            "signal-svc",
            "--cluster-name=kubernetes",
            "--identity=pod-a",
        ];
        argv.extend_from_slice(extra);
        // Plaintext, said explicitly, unless the case is about TLS.
        if !extra.iter().any(|a| a.starts_with("--tls-")) {
            argv.push("--insecure-plaintext");
        }
        let args = Args::try_parse_from(argv).map_err(|e| e.to_string())?;
        args.validate().map_err(|e| e.to_string())
    }

    #[test]
    fn mutual_tls_or_an_explicit_plaintext_flag() {
        let bare = |extra: &[&str]| {
            let mut argv = vec![
                "signal-svc",
                "--cluster-name=kubernetes",
                "--identity=pod-a",
                "--actuator-endpoints=a:1",
            ];
            argv.extend_from_slice(extra);
            Args::try_parse_from(argv)
                .map_err(|e| e.to_string())
                .and_then(|a| {
                    a.validate()
                        .map(|c| c.tls.is_none())
                        .map_err(|e| e.to_string())
                })
        };
        // Nothing said: refused, naming every TLS flag and the way out.
        let e = bare(&[]).unwrap_err();
        for f in [
            "--tls-ca",
            "--tls-cert",
            "--tls-key",
            "--insecure-plaintext",
        ] {
            assert!(e.contains(f), "{f}: {e}");
        }
        // A CA alone is not mutual TLS.
        let e = bare(&["--tls-ca=/nonexistent/ca.pem"]).unwrap_err();
        assert!(e.contains("--tls-cert"), "{e}");
        assert_eq!(bare(&["--insecure-plaintext"]), Ok(true));
        // The flag excludes every TLS flag.
        for tls in [
            "--tls-ca=c",
            "--tls-cert=c",
            "--tls-key=k",
            "--tls-server-name=x",
        ] {
            assert!(bare(&["--insecure-plaintext", tls]).is_err(), "{tls}");
        }
    }

    #[test]
    fn defaults_and_static_endpoints() {
        let c = parse(&["--actuator-endpoints=10.0.0.1:9443, http://10.0.0.2:9443"]).unwrap();
        assert_eq!(
            c.discovery,
            Discovery::Static(vec!["10.0.0.1:9443".into(), "10.0.0.2:9443".into()])
        );
        assert_eq!(c.lease_name, "cutover-signal-svc");
        assert_eq!(c.lease.duration, Duration::from_secs(4));
        assert_eq!(c.lease.renew_deadline, Duration::from_secs(3));
        assert_eq!(c.lease.renew_interval, Duration::from_millis(500));
        assert_eq!(c.resync_interval, Duration::from_secs(300));
        assert_eq!(c.shutdown_grace, Duration::from_secs(10));
        assert_eq!(c.admin_listen.to_string(), "0.0.0.0:9090");
        assert_eq!(c.built_ins, crate::core::taints::BuiltIns::default());
    }

    #[test]
    fn built_in_triggers_turn_off_one_by_one() {
        let c = parse(&[
            "--actuator-endpoints=a:1",
            "--trigger-karpenter-disrupted=false",
        ])
        .unwrap();
        assert!(!c.built_ins.karpenter_disrupted);
        assert!(c.built_ins.cluster_autoscaler && c.built_ins.exclude_label);
        let c = parse(&[
            "--actuator-endpoints=a:1",
            "--trigger-cluster-autoscaler=false",
            "--trigger-exclude-label=false",
        ])
        .unwrap();
        assert!(c.built_ins.karpenter_disrupted);
        assert!(!c.built_ins.cluster_autoscaler && !c.built_ins.exclude_label);
        let err =
            parse(&["--actuator-endpoints=a:1", "--trigger-exclude-label=maybe"]).unwrap_err();
        assert!(err.contains("--trigger-exclude-label"), "{err}");
    }

    /// Deletion is on by default, the two cordon-based triggers off; each switches alone, and a
    /// value that is not a boolean stops start-up naming the flag.
    #[test]
    fn state_triggers_switch() {
        let c = parse(&["--actuator-endpoints=a:1"]).unwrap();
        assert!(c.built_ins.node_deleting);
        assert!(!c.built_ins.drain_conditions && !c.built_ins.cordon);
        let c = parse(&[
            "--actuator-endpoints=a:1",
            "--trigger-node-deleting=false",
            "--trigger-drain-conditions=true",
        ])
        .unwrap();
        assert!(!c.built_ins.node_deleting && c.built_ins.drain_conditions);
        assert!(!c.built_ins.cordon);
        let c = parse(&["--actuator-endpoints=a:1", "--trigger-cordon=true"]).unwrap();
        assert!(c.built_ins.cordon && c.built_ins.node_deleting && !c.built_ins.drain_conditions);
        for flag in [
            "--trigger-node-deleting",
            "--trigger-drain-conditions",
            "--trigger-cordon",
        ] {
            let arg = format!("{flag}=yes please");
            let err = parse(&["--actuator-endpoints=a:1", &arg]).unwrap_err();
            assert!(err.contains(flag), "{err}");
        }
    }

    #[test]
    fn errors_name_the_flag() {
        let cases: &[(&[&str], &str)] = &[
            (&[], "actuator"),
            (
                &["--actuator-endpoints=a:1", "--actuator-service=svc:1"],
                "actuator",
            ),
            (&["--actuator-service=svc"], "--actuator-service"),
            (
                &["--actuator-endpoints=host:notaport"],
                "--actuator-endpoints",
            ),
            (
                &[
                    "--actuator-endpoints=a:1",
                    "--lease-duration=10s",
                    "--lease-renew-deadline=8s",
                    "--lease-renew-interval=6s",
                ],
                "--lease-renew-interval",
            ),
            (
                &[
                    "--actuator-endpoints=a:1",
                    "--lease-duration=4s",
                    "--lease-renew-deadline=4s",
                ],
                "--lease-renew-deadline",
            ),
            (
                &["--actuator-endpoints=a:1", "--lease-duration=soon"],
                "--lease-duration",
            ),
            (
                &["--actuator-endpoints=a:1", "--tls-ca=/nonexistent/ca.pem"],
                "--tls-ca",
            ),
            (
                &["--actuator-endpoints=a:1", "--tls-server-name=x"],
                "--tls-ca",
            ),
            (&["--actuator-endpoints=a:1", "--tls-cert=/c"], "--tls-key"),
            (
                &["--actuator-endpoints=a:1", "--extra-taint-keys=a=b"],
                "--extra-taint-keys",
            ),
            (
                &["--actuator-endpoints=a:1", "--log-format=xml"],
                "--log-format",
            ),
        ];
        for (argv, flag) in cases {
            let err = parse(argv).expect_err(&format!("{argv:?} must fail"));
            assert!(err.contains(flag), "{argv:?}: {err}");
        }
    }

    /// Each relation between the lease and assignment timings is refused with a message
    /// naming both flags, and holds exactly at its edge.
    #[test]
    fn timing_relations_name_both_flags() {
        let ep = "--actuator-endpoints=a:1";
        let refused: &[(&[&str], [&str; 2])] = &[
            // The renew deadline at least 200ms below the lease duration.
            (
                &["--lease-duration=4s", "--lease-renew-deadline=3900ms"],
                ["--lease-renew-deadline", "--lease-duration"],
            ),
            // The renew interval at most half the renew deadline.
            (
                &["--lease-renew-deadline=3s", "--lease-renew-interval=1600ms"],
                ["--lease-renew-interval", "--lease-renew-deadline"],
            ),
            // The retry interval at most the lease duration.
            (
                &["--lease-duration=4s", "--lease-retry-interval=4100ms"],
                ["--lease-retry-interval", "--lease-duration"],
            ),
            // Two keepalive rounds within one grant.
            (
                &["--assignment-valid-for=3s", "--actuator-keepalive=1500ms"],
                ["--actuator-keepalive", "--assignment-valid-for"],
            ),
            (
                &["--assignment-valid-for=1s", "--actuator-keepalive=2s"],
                ["--actuator-keepalive", "--assignment-valid-for"],
            ),
            // No grant longer than actuator-svc accepts.
            (
                &["--assignment-valid-for=61s"],
                ["--assignment-valid-for", "actuator-svc"],
            ),
        ];
        for (argv, names) in refused {
            let mut full = vec![ep];
            full.extend_from_slice(argv);
            let err = parse(&full).expect_err(&format!("{argv:?} must be refused"));
            for n in names {
                assert!(err.contains(n), "{argv:?}: {err:?} does not name {n}");
            }
        }
        let edges: &[&[&str]] = &[
            &["--lease-duration=4s", "--lease-renew-deadline=3800ms"],
            &["--lease-renew-deadline=3s", "--lease-renew-interval=1500ms"],
            &["--lease-duration=4s", "--lease-retry-interval=4s"],
            &["--assignment-valid-for=3s", "--actuator-keepalive=1499ms"],
            &["--assignment-valid-for=60s", "--actuator-keepalive=29s"],
        ];
        for argv in edges {
            let mut full = vec![ep];
            full.extend_from_slice(argv);
            parse(&full).unwrap_or_else(|e| panic!("{argv:?} must be accepted: {e}"));
        }
    }

    /// A repeated flag takes its last value, as actuator-svc does (`args_override_self`): the
    /// chart appends `signal.extraArgs` after its own flags.
    #[test]
    fn a_repeated_flag_takes_the_last_value() {
        let c = parse(&[
            "--actuator-endpoints=a:1",
            "--lease-duration=10s",
            "--lease-renew-deadline=3s",
            "--lease-duration=6s",
            "--log-format=json",
            "--log-format=plain",
            "--dry-run",
            "--dry-run",
            "--trigger-exclude-label=false",
            "--trigger-exclude-label=true",
            "--cluster-name=other",
        ])
        .unwrap();
        assert_eq!(c.lease.duration, Duration::from_secs(6));
        assert_eq!(c.log_format, LogFormat::Plain);
        assert!(c.dry_run);
        assert!(c.built_ins.exclude_label);
        assert_eq!(c.cluster_name, "other");
        let c = parse(&["--actuator-service=a.svc:1", "--actuator-service=b.svc:2"]).unwrap();
        assert_eq!(
            c.discovery,
            Discovery::Service {
                host: "b.svc".into(),
                port: 2
            }
        );
        // List flags add up.
        let c = parse(&[
            "--actuator-endpoints=a:1",
            "--extra-taint-keys=x",
            "--extra-taint-keys=y",
        ])
        .unwrap();
        assert_eq!(c.extra_taint_keys, ["x", "y"]);
    }

    /// The texts are `cutover_runtime::duration`'s (tested there); the refusals are worded here.
    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("30").unwrap(), Duration::from_secs(30));
        assert_eq!(
            parse_duration(" 5 parsecs").unwrap_err(),
            r#"invalid duration unit in "5 parsecs" (use ms, s, m, h)"#
        );
        assert_eq!(
            parse_duration("soon").unwrap_err(),
            r#"invalid duration "soon""#
        );
    }
}
