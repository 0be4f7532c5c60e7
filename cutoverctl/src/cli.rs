//! Command-line flags. Every connection flag has an environment fallback so scripts and the
//! sandbox can point the tool at an actuator once.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "cutoverctl",
    version,
    about = "Query and steer cutover's actuator-svc"
)]
pub struct Cli {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct ConnArgs {
    /// The actuator's gRPC endpoint, e.g. https://actuator-svc.cutover:9443 (or
    /// https://127.0.0.1:9443 through `kubectl port-forward`, with --tls-server-name).
    #[arg(
        long,
        env = "CUTOVER_ENDPOINT",
        default_value = "https://127.0.0.1:9443",
        global = true
    )]
    pub endpoint: String,
    /// CA certificate (PEM) that signed the actuator's serving certificate.
    #[arg(long, env = "CUTOVER_TLS_CA", global = true)]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS: its SAN must be on the actuator's
    /// --tool-clients (the chart's cutoverctl-tls Secret holds one).
    #[arg(long, env = "CUTOVER_TLS_CERT", global = true)]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM) of the client certificate.
    #[arg(long, env = "CUTOVER_TLS_KEY", global = true)]
    pub tls_key: Option<PathBuf>,
    /// Server name to verify in the actuator's certificate (default: the endpoint's host).
    #[arg(long, env = "CUTOVER_TLS_SERVER_NAME", global = true)]
    pub tls_server_name: Option<String>,
    /// Talk plaintext to an http:// endpoint, without TLS or a client certificate: only an
    /// actuator started with --insecure-plaintext (tests) answers that. Warns on stderr.
    #[arg(
        long,
        env = "CUTOVER_INSECURE_PLAINTEXT",
        global = true,
        conflicts_with_all = ["tls_ca", "tls_cert", "tls_key", "tls_server_name"]
    )]
    pub insecure_plaintext: bool,
    /// Give up connecting or on a unary call after this long.
    #[arg(long, env = "CUTOVER_TIMEOUT", value_parser = parse_duration, default_value = "30s", global = true)]
    pub timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub struct NodeArgs {
    /// The node's name.
    pub node: String,
    /// The node's UID (metadata.uid).
    #[arg(long)]
    pub uid: Option<String>,
    /// The node's spec.providerID; finds entries of NIC-based pools exactly.
    #[arg(long)]
    pub provider_id: Option<String>,
    /// An InternalIP of the node (repeat for IPv4 and IPv6); finds entries of IP-based pools.
    #[arg(long = "ip")]
    pub ips: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum State {
    Down,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Wait {
    /// Return once queued.
    Queued,
    /// Return once Azure accepted every write.
    Accepted,
    /// Return once every entry reads back the new state.
    Effective,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the admin state of every backend entry of a node.
    Get {
        #[command(flatten)]
        node: NodeArgs,
        /// Read from Azure now instead of the actuator's cache.
        #[arg(long)]
        fresh: bool,
    },
    /// Set a node's admin state on every backend entry.
    Set {
        #[command(flatten)]
        node: NodeArgs,
        /// The admin state to set.
        #[arg(value_enum)]
        state: State,
        /// Why (kept with the held entries).
        #[arg(long, default_value = "")]
        reason: String,
        /// What to wait for before returning.
        #[arg(long, value_enum, default_value_t = Wait::Effective)]
        wait: Wait,
        /// Upper bound of the wait.
        #[arg(long, value_parser = parse_duration, default_value = "60s")]
        wait_timeout: Duration,
    },
    /// List the nodes and entries the actuator holds Down.
    List {
        /// Only this load balancer.
        #[arg(long)]
        load_balancer: Option<String>,
    },
    /// Wait until every backend entry of a node reads back the given state in Azure with its
    /// load balancer's operation complete (polls the actuator's fresh Get, which answers the
    /// entries of a load balancer still `Updating` as pending). The global `--timeout` bounds
    /// the whole wait. Exits 0 when reached, 3 on timeout. The same gate as the Node condition
    /// `LoadBalancerAdminStateDown`, for tools that talk to the actuator.
    Wait {
        #[command(flatten)]
        node: NodeArgs,
        /// The state to wait for.
        #[arg(long, value_enum)]
        state: State,
        /// Time between reads (each is one fresh read per load balancer in Azure).
        #[arg(long, value_parser = parse_duration, default_value = "2s")]
        interval: Duration,
    },
    /// Follow results as the actuator produces them (Ctrl-C to stop).
    Watch {
        /// Only this node.
        node: Option<String>,
    },
}

/// Parses `500ms`, `30s`, `2m`, or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration {text:?}: expected e.g. 500ms, 30s, 2m"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        other => return Err(format!("invalid duration unit {other:?}: use ms, s or m")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flags_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn plaintext_flag_excludes_the_tls_flags() {
        let cli = Cli::try_parse_from([
            "cutoverctl",
            "list",
            "--endpoint",
            "http://127.0.0.1:9443",
            "--insecure-plaintext",
        ])
        .unwrap();
        assert!(cli.conn.insecure_plaintext);
        for tls in ["--tls-ca", "--tls-cert", "--tls-key", "--tls-server-name"] {
            let r = Cli::try_parse_from(["cutoverctl", "list", "--insecure-plaintext", tls, "x"]);
            assert!(r.is_err(), "{tls}");
        }
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert!(parse_duration("5h").is_err());
        assert!(parse_duration("fast").is_err());
    }

    #[test]
    fn wait_takes_node_state_and_timeout() {
        let cli = Cli::try_parse_from([
            "cutoverctl",
            "wait",
            "aks-a",
            "--state",
            "down",
            "--timeout",
            "90s",
        ])
        .unwrap();
        match cli.command {
            Command::Wait {
                node,
                state,
                interval,
            } => {
                assert_eq!(node.node, "aks-a");
                assert_eq!(state, State::Down);
                assert_eq!(cli.conn.timeout, Duration::from_secs(90));
                assert_eq!(interval, Duration::from_secs(2));
            }
            other => panic!("parsed {other:?}"),
        }
        assert!(
            Cli::try_parse_from(["cutoverctl", "wait", "aks-a"]).is_err(),
            "--state is required"
        );
    }

    #[test]
    fn set_takes_node_state_and_wait() {
        let cli = Cli::try_parse_from([
            "cutoverctl",
            "set",
            "aks-a",
            "down",
            "--ip",
            "10.0.0.4",
            "--ip",
            "fd00::4",
            "--wait",
            "accepted",
            "-o",
            "json",
        ])
        .unwrap();
        assert_eq!(cli.output, Output::Json);
        match cli.command {
            Command::Set {
                node, state, wait, ..
            } => {
                assert_eq!(node.node, "aks-a");
                assert_eq!(node.ips, ["10.0.0.4", "fd00::4"]);
                assert_eq!(state, State::Down);
                assert_eq!(wait, Wait::Accepted);
            }
            other => panic!("parsed {other:?}"),
        }
    }
}
