//! Runs one command against the actuator and prints its answer.

use crate::cli::{Cli, Command, NodeArgs, Output, State, Wait};
use crate::{connect, escape, out, render};
use cutover_proto::v1::actuator_client::ActuatorClient;
use cutover_proto::v1::{
    AdminState, GetNodeAdminStateRequest, ListHeldEntriesRequest, NodeRef,
    SetNodeAdminStateRequest, WaitFor, WatchResultsRequest,
};
use std::fmt;
use std::process::ExitCode;
use std::time::Duration;
use tokio_stream::StreamExt;
use tonic::transport::Channel;

/// How a successful command ended.
#[derive(Debug)]
pub enum Outcome {
    Done,
    /// `set --wait` returned before the requested phase, or `wait` timed out.
    WaitTimedOut,
}

impl Outcome {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Outcome::Done => ExitCode::SUCCESS,
            Outcome::WaitTimedOut => ExitCode::from(3),
        }
    }
}

/// Why a command failed.
#[derive(Debug)]
pub enum Failure {
    /// Bad flags, unreadable files, no connection.
    Setup(anyhow::Error),
    /// The actuator answered with an error status.
    Refused(tonic::Status),
}

impl Failure {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Failure::Setup(_) => ExitCode::from(2),
            Failure::Refused(_) => ExitCode::FAILURE,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Setup(e) => write!(f, "{e:#}"),
            Failure::Refused(status) => write!(
                f,
                "the actuator refused ({:?}): {}",
                status.code(),
                status.message()
            ),
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Setup(e)
    }
}

impl From<tonic::Status> for Failure {
    fn from(s: tonic::Status) -> Self {
        Failure::Refused(s)
    }
}

fn node_ref(args: NodeArgs) -> NodeRef {
    NodeRef {
        name: args.node,
        uid: args.uid.unwrap_or_default(),
        provider_id: args.provider_id.unwrap_or_default(),
        internal_ips: args.ips,
        zone: String::new(),
    }
}

/// Whether every entry reads `want`, with a summary. An entry answered without an admin state
/// is pending (an operation runs on its load balancer: ARM shows the requested state, not the
/// effective one) and never counts, whatever is waited for: the actuator answers an entry
/// that has no admin state in ARM as `None` already.
fn reached(entries: &[cutover_proto::v1::EntryRef], want: AdminState) -> (bool, String) {
    if entries.is_empty() {
        return (false, "no backend entries found for the node".to_owned());
    }
    let done = entries.iter().filter(|e| e.admin_state() == want).count();
    let pending = entries
        .iter()
        .filter(|e| e.admin_state() == AdminState::Unspecified)
        .count();
    let mut summary = format!("{done} of {} entries {want:?}", entries.len());
    if pending > 0 {
        summary.push_str(&format!(
            ", {pending} pending (an operation is running on their load balancer)"
        ));
    }
    (done == entries.len(), summary)
}

fn print_json(value: &serde_json::Value) {
    out::line(&escape::json(value));
}

/// What every command uses: the client, the global `--timeout` and the output format.
struct Session {
    client: ActuatorClient<Channel>,
    timeout: Duration,
    json: bool,
}

pub async fn run(cli: Cli) -> Result<Outcome, Failure> {
    let channel = connect::channel(&cli.conn).await?;
    let mut session = Session {
        client: ActuatorClient::new(channel),
        timeout: cli.conn.timeout,
        json: cli.output == Output::Json,
    };
    match cli.command {
        Command::Get { node, fresh } => get(&mut session, node, fresh).await,
        Command::Set {
            node,
            state,
            reason,
            wait,
            wait_timeout,
        } => set(&mut session, node, state, reason, wait, wait_timeout).await,
        Command::List { load_balancer } => list(&mut session, load_balancer).await,
        Command::Wait {
            node,
            state,
            interval,
        } => wait(&mut session, node, state, interval).await,
        Command::Watch { node } => watch(&mut session, node).await,
    }
}

/// `get`: the node's entries and their admin state.
async fn get(session: &mut Session, node: NodeArgs, fresh: bool) -> Result<Outcome, Failure> {
    let resp = session
        .client
        .get_node_admin_state(GetNodeAdminStateRequest {
            node: Some(node_ref(node)),
            fresh,
        })
        .await?
        .into_inner();
    if session.json {
        print_json(&render::get_json(&resp));
    } else {
        out::print(&render::get_table(&resp));
    }
    Ok(Outcome::Done)
}

/// `set`: asks for an admin state and, with `--wait`, waits for its phase.
async fn set(
    session: &mut Session,
    node: NodeArgs,
    state: State,
    reason: String,
    wait: Wait,
    wait_timeout: Duration,
) -> Result<Outcome, Failure> {
    let admin_state = match state {
        State::Down => AdminState::Down,
        State::None => AdminState::None,
    };
    let wait = match wait {
        Wait::Queued => WaitFor::Unspecified,
        Wait::Accepted => WaitFor::Accepted,
        Wait::Effective => WaitFor::Effective,
    };
    let request = SetNodeAdminStateRequest {
        node: Some(node_ref(node)),
        admin_state: admin_state as i32,
        reason,
        wait: wait as i32,
        wait_timeout: prost_types::Duration::try_from(wait_timeout).ok(),
    };
    let mut call = tonic::Request::new(request);
    // The call itself may last as long as the wait, plus slack for the answer.
    call.set_timeout(wait_timeout + session.timeout);
    let resp = session
        .client
        .set_node_admin_state(call)
        .await?
        .into_inner();
    let result = resp.result.unwrap_or_default();
    if session.json {
        let mut value = render::result_json(&result);
        value["timedOut"] = resp.timed_out.into();
        print_json(&value);
    } else {
        out::print(&render::result_table(std::slice::from_ref(&result)));
        if resp.timed_out {
            eprintln!("cutoverctl: the wait timed out before the requested phase");
        }
    }
    Ok(if resp.timed_out {
        Outcome::WaitTimedOut
    } else {
        Outcome::Done
    })
}

/// `list`: the entries held Down, of one load balancer or all.
async fn list(session: &mut Session, load_balancer: Option<String>) -> Result<Outcome, Failure> {
    let resp = session
        .client
        .list_held_entries(ListHeldEntriesRequest {
            load_balancer: load_balancer.unwrap_or_default(),
        })
        .await?
        .into_inner();
    if session.json {
        print_json(&render::held_json(&resp));
    } else {
        out::print(&render::held_table(&resp));
    }
    Ok(Outcome::Done)
}

/// `wait`: reads the node fresh every `interval` until every entry reads `state`, within the
/// global `--timeout`.
async fn wait(
    session: &mut Session,
    node: NodeArgs,
    state: State,
    interval: Duration,
) -> Result<Outcome, Failure> {
    let wait_timeout = session.timeout;
    let want = match state {
        State::Down => AdminState::Down,
        State::None => AdminState::None,
    };
    let name = node.node.clone();
    let node = node_ref(node);
    let deadline = tokio::time::Instant::now() + wait_timeout;
    let last = loop {
        let resp = session
            .client
            .get_node_admin_state(GetNodeAdminStateRequest {
                node: Some(node.clone()),
                fresh: true,
            })
            .await?
            .into_inner();
        let (reached, summary) = reached(&resp.entries, want);
        if reached {
            if session.json {
                print_json(&render::get_json(&resp));
            } else {
                out::line(&format!("node {name}: {summary}"));
            }
            return Ok(Outcome::Done);
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            break summary;
        }
        tokio::time::sleep(interval.min(deadline - now)).await;
    };
    eprintln!(
        "cutoverctl: timed out after {wait_timeout:?} waiting for node {name} to be {want:?} on every entry; last read: {last}"
    );
    Ok(Outcome::WaitTimedOut)
}

/// `watch`: prints every result as it comes, until interrupted.
async fn watch(session: &mut Session, node: Option<String>) -> Result<Outcome, Failure> {
    let mut call = tonic::Request::new(WatchResultsRequest {
        node_name: node.unwrap_or_default(),
    });
    // A watch lasts until interrupted: lift the unary deadline.
    call.set_timeout(std::time::Duration::from_secs(365 * 24 * 3600));
    let mut stream = session.client.watch_results(call).await?.into_inner();
    let mut header = true;
    while let Some(item) = stream.next().await {
        let result = item?;
        if session.json {
            print_json(&render::result_json(&result));
        } else {
            let text = render::result_table(std::slice::from_ref(&result));
            let mut lines = text.lines();
            let head = lines.next().unwrap_or_default();
            if header {
                out::line(head);
                header = false;
            }
            for line in lines {
                out::line(line);
            }
        }
    }
    Ok(Outcome::Done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cutover_proto::v1::EntryRef;

    fn entry(state: AdminState) -> EntryRef {
        EntryRef {
            admin_state: state as i32,
            ..EntryRef::default()
        }
    }

    #[test]
    fn every_entry_must_read_the_state() {
        assert!(
            !reached(&[], AdminState::Down).0,
            "no entries is not reached"
        );
        let mixed = [entry(AdminState::Down), entry(AdminState::None)];
        let (ok, summary) = reached(&mixed, AdminState::Down);
        assert!(!ok);
        assert_eq!(summary, "1 of 2 entries Down");
        assert!(
            reached(
                &[entry(AdminState::Down), entry(AdminState::Down)],
                AdminState::Down
            )
            .0
        );
        // An entry answered without an admin state is pending (its load balancer's operation
        // runs): neither Down nor None yet.
        for want in [AdminState::None, AdminState::Down] {
            let (ok, summary) = reached(&[entry(AdminState::Unspecified), entry(want)], want);
            assert!(!ok, "{want:?}");
            assert!(summary.contains("1 pending"), "{summary}");
        }
    }
}
