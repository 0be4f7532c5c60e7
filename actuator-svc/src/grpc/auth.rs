//! Client-certificate allow-lists. The TLS handshake (rustls with `--tls-client-ca`) already
//! refused callers without a certificate from our CA; here the leaf certificate's identities
//! (its SAN DNS names and URIs, never the subject CN: `identity`) are compared exactly with the
//! list of the RPC group: the desired-state stream (`--signal-clients`) or the tool RPCs
//! (`--tool-clients`). An empty list admits nobody.
//!
//! Refusals, each logged with what the certificate presented and counted in
//! `cutover_actuator_auth_refused_total{group,reason}`:
//! - no client certificate: UNAUTHENTICATED (`no_certificate`);
//! - a certificate without a DNS or URI SAN (a CN alone): UNAUTHENTICATED (`no_san`);
//! - SANs none of which is on the group's list: PERMISSION_DENIED (`not_allowed`).

use crate::identity::{Allowed, Presented, presented};
use crate::metrics::Metrics;
use std::sync::Arc;
use tonic::{Request, Status};

/// Which group an RPC belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Signal,
    Tool,
}

impl Role {
    fn group(self) -> &'static str {
        match self {
            Role::Signal => "signal",
            Role::Tool => "tool",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Role::Signal => "the desired-state stream (--signal-clients)",
            Role::Tool => "the tool RPCs (--tool-clients)",
        }
    }
}

/// The allow-lists. `client_auth` is false only with `--insecure-plaintext`, where nothing can
/// be checked (and the process says so at start and in `cutover_actuator_insecure_plaintext`).
#[derive(Debug, Clone, Default)]
pub struct AllowLists {
    pub client_auth: bool,
    pub signal: Vec<Allowed>,
    pub tool: Vec<Allowed>,
    /// Where refusals are counted (none in unit tests).
    pub metrics: Option<Arc<Metrics>>,
}

impl AllowLists {
    /// Checks the caller of `req` for `role`.
    pub fn check<T>(&self, req: &Request<T>, role: Role) -> Result<(), Status> {
        if !self.client_auth {
            return Ok(());
        }
        let leaf = req.peer_certs().and_then(|certs| certs.first().cloned());
        let Some(leaf) = leaf else {
            return Err(self.refuse(
                role,
                "no_certificate",
                Status::unauthenticated("a client certificate is required"),
                None,
            ));
        };
        self.check_leaf(leaf.as_ref(), role)
    }

    /// Checks a DER leaf certificate for `role` (`check` without the request).
    pub fn check_leaf(&self, der: &[u8], role: Role) -> Result<(), Status> {
        let Some(p) = presented(der) else {
            return Err(self.refuse(
                role,
                "no_san",
                Status::unauthenticated("the client certificate cannot be read"),
                None,
            ));
        };
        if p.sans.is_empty() {
            let cn = p.common_name.as_deref().unwrap_or("");
            let status = Status::unauthenticated(format!(
                "the client certificate has no DNS or URI subject alternative name (subject CN {cn:?} is not an identity); \
                 issue it with the identity as a SAN"
            ));
            return Err(self.refuse(role, "no_san", status, Some(&p)));
        }
        let list = match role {
            Role::Signal => &self.signal,
            Role::Tool => &self.tool,
        };
        if p.sans.iter().any(|san| list.iter().any(|a| a.matches(san))) {
            return Ok(());
        }
        let sans: Vec<String> = p.sans.iter().map(ToString::to_string).collect();
        let status = Status::permission_denied(format!(
            "client {sans:?} is not allowed to call {}",
            role.describe()
        ));
        Err(self.refuse(role, "not_allowed", status, Some(&p)))
    }

    fn refuse(&self, role: Role, reason: &str, status: Status, p: Option<&Presented>) -> Status {
        let sans: Vec<String> = p
            .map(|p| p.sans.iter().map(ToString::to_string).collect())
            .unwrap_or_default();
        let cn = p.and_then(|p| p.common_name.clone());
        tracing::warn!(
            group = role.group(),
            reason,
            ?sans,
            subject_cn = ?cn,
            code = ?status.code(),
            "client refused: {}",
            status.message()
        );
        if let Some(m) = &self.metrics {
            m.auth_refused(role.group(), reason);
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::SanType;

    fn cert(sans: Vec<SanType>, cn: Option<&str>) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = sans;
        if let Some(cn) = cn {
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, cn);
        }
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    fn lists() -> AllowLists {
        AllowLists {
            client_auth: true,
            signal: vec![
                Allowed::parse("spiffe://cluster.local/ns/cutover/sa/signal-svc").unwrap(),
            ],
            tool: vec![Allowed::parse("cutoverctl.cutover.svc").unwrap()],
            metrics: None,
        }
    }

    #[test]
    fn without_client_auth_nothing_is_checked() {
        let lists = AllowLists::default();
        assert!(lists.check(&Request::new(()), Role::Tool).is_ok());
        assert_eq!(
            self::lists()
                .check(&Request::new(()), Role::Tool)
                .unwrap_err()
                .code(),
            tonic::Code::Unauthenticated
        );
    }

    #[test]
    fn only_an_exact_san_of_the_group_passes() {
        let l = lists();
        let signal = cert(
            vec![SanType::URI(
                "spiffe://cluster.local/ns/cutover/sa/signal-svc"
                    .try_into()
                    .unwrap(),
            )],
            None,
        );
        assert!(l.check_leaf(&signal, Role::Signal).is_ok());
        let e = l.check_leaf(&signal, Role::Tool).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        // The CN names an allowed identity, but only SANs count.
        let cn_only = cert(vec![], Some("cutoverctl.cutover.svc"));
        let e = l.check_leaf(&cn_only, Role::Tool).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(
            e.message()
                .contains("no DNS or URI subject alternative name"),
            "{e:?}"
        );
        let cn_and_san = cert(
            vec![SanType::DnsName("stranger.example".try_into().unwrap())],
            Some("cutoverctl.cutover.svc"),
        );
        assert_eq!(
            l.check_leaf(&cn_and_san, Role::Tool).unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
        // An empty list admits nobody.
        let none = AllowLists {
            tool: vec![],
            ..lists()
        };
        let tool = cert(
            vec![SanType::DnsName(
                "cutoverctl.cutover.svc".try_into().unwrap(),
            )],
            None,
        );
        assert!(l.check_leaf(&tool, Role::Tool).is_ok());
        assert_eq!(
            none.check_leaf(&tool, Role::Tool).unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
    }
}
