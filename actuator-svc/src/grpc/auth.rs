//! Client-certificate allow-lists. The TLS handshake (tonic/rustls with `--tls-client-ca`)
//! already refused callers without a certificate from our CA; here the leaf certificate's
//! identities (SAN DNS names and URIs, else the subject CN) are checked against the list of the
//! RPC group: the desired-state stream (`--signal-clients`) or the tool RPCs (`--tool-clients`).

use crate::identity::identities;
use tonic::{Request, Status};

/// Which group an RPC belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Signal,
    Tool,
}

/// The allow-lists. With client authentication off (no `--tls-client-ca`) nothing is checked;
/// with it on, an empty list admits any certificate our CA signed.
#[derive(Debug, Clone, Default)]
pub struct AllowLists {
    pub client_auth: bool,
    pub signal: Vec<String>,
    pub tool: Vec<String>,
}

impl AllowLists {
    /// Checks the caller of `req` for `role`; PERMISSION_DENIED names the identities seen.
    pub fn check<T>(&self, req: &Request<T>, role: Role) -> Result<(), Status> {
        if !self.client_auth {
            return Ok(());
        }
        let list = match role {
            Role::Signal => &self.signal,
            Role::Tool => &self.tool,
        };
        let Some(certs) = req.peer_certs() else {
            return Err(Status::unauthenticated("a client certificate is required"));
        };
        let Some(leaf) = certs.first() else {
            return Err(Status::unauthenticated("a client certificate is required"));
        };
        if list.is_empty() {
            return Ok(());
        }
        let ids = identities(leaf.as_ref());
        if ids
            .iter()
            .any(|id| list.iter().any(|allowed| allowed.eq_ignore_ascii_case(id)))
        {
            return Ok(());
        }
        let group = match role {
            Role::Signal => "the desired-state stream (--signal-clients)",
            Role::Tool => "the tool RPCs (--tool-clients)",
        };
        Err(Status::permission_denied(format!(
            "client {ids:?} is not allowed to call {group}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_client_auth_nothing_is_checked() {
        let lists = AllowLists::default();
        assert!(lists.check(&Request::new(()), Role::Tool).is_ok());
        let on = AllowLists {
            client_auth: true,
            ..Default::default()
        };
        assert_eq!(
            on.check(&Request::new(()), Role::Tool).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
    }
}
