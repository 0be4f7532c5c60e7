//! ARM's access refusals of a call: which kind, and the actions and scopes its message names.
//! Pure.
//!
//! Three 403 codes (azure-production.md 1.1, 1.2, 1.8, 1.9), each fixed only by a role
//! assignment or by the cluster's owner, never by trying again soon:
//! - `AuthorizationFailed`: no role grants the action at the scope ("does not have
//!   authorization to perform action 'A' over scope 'S'");
//! - `LinkedAuthorizationFailed`: the call itself is granted, but a join on a resource the body
//!   references is not ("... does not have permission to perform action(s) 'A1,A2' on the
//!   linked scope(s) 'S1,S2' (respectively)"; the classic singular form, the form without a
//!   client id, and the cross-tenant form "the current tenant 'T' is not authorized to access
//!   linked subscription 'L'");
//! - `DenyAssignmentAuthorizationFailed`: a role grants it, a deny assignment refuses it ("...
//!   because of the deny assignment with name 'N' and Id 'I' at scope 'D'"): AKS's node
//!   resource group lockdown is one (name "... created by Azure Kubernetes Services for
//!   nrg-lockdown ...").
//!
//! Messages are never matched whole: only the quoted values after fixed anchors are taken.

use super::error::ArmError;

/// Which refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessKind {
    Authorization,
    Linked,
    /// A linked resource in a subscription of another tenant (auxiliary tokens needed).
    CrossTenant,
    DenyAssignment,
}

impl AccessKind {
    /// ARM's error code (also the metric label).
    pub fn code(self) -> &'static str {
        match self {
            AccessKind::Authorization => "AuthorizationFailed",
            AccessKind::Linked | AccessKind::CrossTenant => "LinkedAuthorizationFailed",
            AccessKind::DenyAssignment => "DenyAssignmentAuthorizationFailed",
        }
    }
}

/// An access refusal, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessRefusal {
    pub kind: AccessKind,
    /// The (action, scope) pairs the message names as missing (for a deny assignment: the
    /// action and scope it refused). May be empty when the message names none.
    pub missing: Vec<(String, String)>,
    /// The deny assignment's name and scope (`DenyAssignment` only).
    pub deny_assignment: Option<(String, String)>,
    /// The linked subscription (`CrossTenant` only).
    pub linked_subscription: Option<String>,
}

/// The first `'...'` value after `anchor` (case-insensitive) in `text`.
fn quoted_after<'a>(text: &'a str, anchor: &str) -> Option<&'a str> {
    let at = text
        .to_ascii_lowercase()
        .find(&anchor.to_ascii_lowercase())?;
    let rest = &text[at + anchor.len()..];
    let open = rest.find('\'')?;
    let rest = &rest[open + 1..];
    let close = rest.find('\'')?;
    Some(&rest[..close])
}

fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Pairs actions with scopes: position by position ("(respectively)"); a single action or
/// scope goes with every one of the other list.
fn pairs(actions: Vec<String>, scopes: Vec<String>) -> Vec<(String, String)> {
    match (actions.len(), scopes.len()) {
        (0, _) => Vec::new(),
        (_, 0) => actions.into_iter().map(|a| (a, String::new())).collect(),
        (1, _) => scopes
            .into_iter()
            .map(|s| (actions[0].clone(), s))
            .collect(),
        (_, 1) => actions
            .into_iter()
            .map(|a| (a, scopes[0].clone()))
            .collect(),
        _ => actions.into_iter().zip(scopes).collect(),
    }
}

impl AccessRefusal {
    /// The refusal an ARM error is, if it is one (HTTP 403 with one of the three codes).
    pub fn of(e: &ArmError) -> Option<Self> {
        match e {
            ArmError::Http {
                status: 403,
                code,
                message,
                ..
            } => Self::parse(code, message),
            _ => None,
        }
    }

    /// Parses a refusal from ARM's code and message.
    pub fn parse(code: &str, message: &str) -> Option<Self> {
        let mut r = AccessRefusal {
            kind: AccessKind::Authorization,
            missing: Vec::new(),
            deny_assignment: None,
            linked_subscription: None,
        };
        if code.eq_ignore_ascii_case("LinkedAuthorizationFailed") {
            if let Some(sub) = quoted_after(message, "to access linked subscription") {
                r.kind = AccessKind::CrossTenant;
                r.linked_subscription = Some(sub.to_owned());
                return Some(r);
            }
            r.kind = AccessKind::Linked;
            let actions = quoted_after(message, "does not have permission to perform action")
                .map(list)
                .unwrap_or_default();
            let scopes = quoted_after(message, "on the linked scope")
                .map(list)
                .unwrap_or_default();
            r.missing = pairs(actions, scopes);
        } else if code.eq_ignore_ascii_case("AuthorizationFailed") {
            let action = quoted_after(message, "to perform action");
            let scope = quoted_after(message, "over scope");
            if let Some(a) = action {
                r.missing = vec![(a.to_owned(), scope.unwrap_or_default().to_owned())];
            }
        } else if code.eq_ignore_ascii_case("DenyAssignmentAuthorizationFailed") {
            r.kind = AccessKind::DenyAssignment;
            if let Some(a) = quoted_after(message, "to perform action") {
                let scope = quoted_after(message, "on scope").unwrap_or_default();
                r.missing = vec![(a.to_owned(), scope.to_owned())];
            }
            let name = quoted_after(message, "deny assignment with name");
            let at =
                quoted_after(message, "' at scope").or_else(|| quoted_after(message, "at scope"));
            r.deny_assignment = name.map(|n| (n.to_owned(), at.unwrap_or_default().to_owned()));
        } else {
            return None;
        }
        Some(r)
    }

    /// True when the deny assignment is AKS's node resource group lockdown.
    pub fn lockdown(&self) -> bool {
        self.deny_assignment.as_ref().is_some_and(|(name, _)| {
            let n = name.to_ascii_lowercase();
            n.contains("nrg-lockdown") || n.contains("nrg_lockdown")
        })
    }

    /// The first action named (the metric label), or `-`.
    pub fn first_action(&self) -> &str {
        self.missing.first().map_or("-", |(a, _)| a.as_str())
    }

    /// One line for logs, FAILED results and Node events: what is missing where, and the fix.
    pub fn summary(&self) -> String {
        let named = || {
            self.missing
                .iter()
                .map(|(a, s)| {
                    if s.is_empty() {
                        a.clone()
                    } else {
                        format!("{a} on {s}")
                    }
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        match self.kind {
            AccessKind::Authorization => format!(
                "access refused (AuthorizationFailed): the identity lacks {}; assign the Cutover Load Balancer Writer role there (docs/azure-access.md)",
                named()
            ),
            AccessKind::Linked => format!(
                "linked access refused (LinkedAuthorizationFailed): the identity lacks {}; assign the Cutover Network Joiner role on that resource (docs/azure-access.md)",
                named()
            ),
            AccessKind::CrossTenant => format!(
                "linked access refused (LinkedAuthorizationFailed): the load balancer references subscription {} of another tenant, which needs auxiliary tokens cutover does not send",
                self.linked_subscription.as_deref().unwrap_or("?")
            ),
            AccessKind::DenyAssignment => {
                let (name, scope) = self.deny_assignment.clone().unwrap_or_default();
                if self.lockdown() {
                    format!(
                        "write denied (DenyAssignmentAuthorizationFailed) by AKS's node resource group lockdown (deny assignment at {scope}): no role can allow it; cutover cannot write load balancers there unless the lockdown is lifted (az aks update --nrg-lockdown-restriction-level Unrestricted)"
                    )
                } else {
                    format!(
                        "write denied (DenyAssignmentAuthorizationFailed) by deny assignment '{name}' at {scope} ({}): no role can allow it",
                        named()
                    )
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUBNET: &str = "/subscriptions/s/resourceGroups/net/providers/Microsoft.Network/virtualNetworks/v/subnets/a";

    #[test]
    fn linked_refusals_in_every_recorded_form() {
        let classic = format!(
            "The client 'c' with object id 'o' has permission to perform action 'Microsoft.Network/loadBalancers/write' on scope '/x/lb'; however, it does not have permission to perform action 'Microsoft.Network/virtualNetworks/subnets/join/action' on the linked scope(s) '{SUBNET}' or the linked scope(s) are invalid."
        );
        let r = AccessRefusal::parse("LinkedAuthorizationFailed", &classic).unwrap();
        assert_eq!(r.kind, AccessKind::Linked);
        assert_eq!(
            r.missing,
            vec![(
                "Microsoft.Network/virtualNetworks/subnets/join/action".to_string(),
                SUBNET.to_string()
            )]
        );
        let plural = "The client has permission to perform action 'Microsoft.Network/loadBalancers/write' on scope '/x/lb'; however, it does not have permission to perform action(s) 'Microsoft.Network/publicIPAddresses/join/action,Microsoft.Network/publicIPPrefixes/join/action' on the linked scope(s) '/p/ip,/p/prefix' (respectively) or the linked scope(s) are invalid.";
        let r = AccessRefusal::parse("LinkedAuthorizationFailed", plural).unwrap();
        assert_eq!(r.missing.len(), 2);
        assert_eq!(r.missing[1].1, "/p/prefix");
        assert!(
            r.summary()
                .contains("publicIPPrefixes/join/action on /p/prefix")
        );
        let tenant = "The client has permission to perform action 'Microsoft.Network/loadBalancers/write' on scope '/x', however the current tenant 't' is not authorized to access linked subscription 'other-sub'.";
        let r = AccessRefusal::parse("LinkedAuthorizationFailed", tenant).unwrap();
        assert_eq!(r.kind, AccessKind::CrossTenant);
        assert!(r.summary().contains("other-sub"));
    }

    #[test]
    fn authorization_and_deny_assignment_refusals() {
        let m = "The client 'c' with object id 'o' does not have authorization to perform action 'Microsoft.Network/loadBalancers/write' over scope '/x/lb' or the scope is invalid. If access was recently granted, please refresh your credentials.";
        let r = AccessRefusal::parse("AuthorizationFailed", m).unwrap();
        assert_eq!(
            r.missing,
            vec![(
                "Microsoft.Network/loadBalancers/write".into(),
                "/x/lb".into()
            )]
        );
        let d = "The client 'c' with object id 'o' has permission to perform action 'Microsoft.Network/loadBalancers/write' on scope '/x/lb'; however, the access is denied because of the deny assignment with name 'kubernetes.azure.com/1/2: node resource group deny assignment created by Azure Kubernetes Services for nrg-lockdown, see: https://aka.ms/aks/nrg_lockdown' and Id 'abc' at scope '/subscriptions/s/resourcegroups/mc'.";
        let r = AccessRefusal::parse("DenyAssignmentAuthorizationFailed", d).unwrap();
        assert!(r.lockdown());
        assert_eq!(
            r.deny_assignment.as_ref().unwrap().1,
            "/subscriptions/s/resourcegroups/mc"
        );
        assert!(
            r.summary().contains("node resource group lockdown"),
            "{}",
            r.summary()
        );
        assert!(AccessRefusal::parse("Conflict", m).is_none());
    }
}
