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
//!
//! And two refusals outside RBAC that no role fixes either (1.8), classified the same way so a
//! write is not tried again soon:
//! - `RequestDisallowedByPolicy` (403, Azure Policy's deny effect: "returned as a 403
//!   (Forbidden)", Microsoft Learn governance/policy/concepts/effect-deny): "Resource 'R' was
//!   disallowed by policy. Policy identifiers: '[{"policyAssignment":{"name":..,"id":..},
//!   "policyDefinition":{..}}]'." (Microsoft's troubleshooting page for the code), or the older
//!   "The resource action 'A' is disallowed by one or more policies. Policy identifier(s):
//!   'ID'.";
//! - `ScopeLocked` (409, a `ReadOnly` management lock): "The scope 'S' cannot perform write
//!   operation because following scope(s) are locked: 'L'. Please remove the lock and try
//!   again." (recorded in Azure/azure-sdk-for-java#2560, Azure/migAz#194).
//!
//! Their status is matched loosely (any 4xx): the contract marks both unverified (7.4), and only
//! the deny effect's 403 is documented.
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
    /// An Azure Policy assignment denies the write.
    Policy,
    /// A `ReadOnly` management lock forbids the write.
    Locked,
}

impl AccessKind {
    /// ARM's error code (also the metric label).
    pub fn code(self) -> &'static str {
        match self {
            AccessKind::Authorization => "AuthorizationFailed",
            AccessKind::Linked | AccessKind::CrossTenant => "LinkedAuthorizationFailed",
            AccessKind::DenyAssignment => "DenyAssignmentAuthorizationFailed",
            AccessKind::Policy => "RequestDisallowedByPolicy",
            AccessKind::Locked => "ScopeLocked",
        }
    }

    /// Whether a role assignment can fix it (the permissions API then says what is missing).
    pub fn rbac(self) -> bool {
        matches!(self, AccessKind::Authorization | AccessKind::Linked)
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
    /// The policy assignments (names, else ids) that deny it (`Policy` only; may be empty).
    pub policies: Vec<String>,
    /// The locked scopes (`Locked` only).
    pub locked_scopes: Vec<String>,
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

/// The policy assignments a `Policy identifiers` value names: the JSON list's assignment
/// names (else their ids), or the value itself (the older form: ids, comma-separated).
fn policy_names(v: &str) -> Vec<String> {
    let Ok(serde_json::Value::Array(items)) = serde_json::from_str::<serde_json::Value>(v) else {
        return list(v);
    };
    items
        .iter()
        .filter_map(|i| {
            let a = i.get("policyAssignment")?;
            let name = a.get("name").and_then(serde_json::Value::as_str);
            let id = a.get("id").and_then(serde_json::Value::as_str);
            name.or(id).map(str::to_owned)
        })
        .collect()
}

impl AccessRefusal {
    /// The refusal an ARM error is, if it is one (HTTP 403 with one of the three RBAC codes;
    /// any 4xx with `RequestDisallowedByPolicy` or `ScopeLocked`).
    pub fn of(e: &ArmError) -> Option<Self> {
        match e {
            ArmError::Http {
                status: 403,
                code,
                message,
                ..
            } => Self::parse(code, message),
            ArmError::Http {
                status: 400..=499,
                code,
                message,
                ..
            } if code.eq_ignore_ascii_case(AccessKind::Policy.code())
                || code.eq_ignore_ascii_case(AccessKind::Locked.code()) =>
            {
                Self::parse(code, message)
            }
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
            policies: Vec::new(),
            locked_scopes: Vec::new(),
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
        } else if code.eq_ignore_ascii_case(AccessKind::Policy.code()) {
            r.kind = AccessKind::Policy;
            if let Some(a) = quoted_after(message, "resource action") {
                r.missing = vec![(a.to_owned(), String::new())];
            }
            r.policies = quoted_after(message, "policy identifier")
                .map(policy_names)
                .unwrap_or_default();
        } else if code.eq_ignore_ascii_case(AccessKind::Locked.code()) {
            r.kind = AccessKind::Locked;
            r.locked_scopes = quoted_after(message, "are locked")
                .map(list)
                .unwrap_or_default();
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
            AccessKind::Policy => {
                let by = if self.policies.is_empty() {
                    "an Azure Policy assignment".to_string()
                } else {
                    format!("Azure Policy assignment(s) {}", self.policies.join(", "))
                };
                format!(
                    "write denied (RequestDisallowedByPolicy) by {by}: no role can allow it; the policy's owner must exempt the load balancer (az policy exemption create) or change the assignment"
                )
            }
            AccessKind::Locked => format!(
                "write refused (ScopeLocked): a ReadOnly management lock on {} forbids writing the load balancer: no role can allow it; remove the lock (az lock list, az lock delete) or make it CanNotDelete, which allows writes",
                if self.locked_scopes.is_empty() {
                    "its scope".to_string()
                } else {
                    self.locked_scopes.join(", ")
                }
            ),
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

    fn http(status: u16, code: &str, message: &str) -> ArmError {
        ArmError::Http {
            op: "put_lb",
            resource: "/x/lb".into(),
            status,
            code: code.into(),
            message: message.into(),
            details: vec![],
            retry_after: None,
            trace: Default::default(),
        }
    }

    #[test]
    fn policy_denials_in_both_recorded_forms_name_their_assignments() {
        let now = r#"Resource 'kubernetes' was disallowed by policy. Policy identifiers: '[{"policyAssignment":{"name":"Deny LB changes","id":"/subscriptions/s/providers/Microsoft.Authorization/policyAssignments/1111aa"},"policyDefinition":{"name":"d","id":"/providers/Microsoft.Authorization/policyDefinitions/83a8"}}]'."#;
        let r = AccessRefusal::of(&http(403, "RequestDisallowedByPolicy", now)).unwrap();
        assert_eq!(r.kind, AccessKind::Policy);
        assert_eq!(r.policies, vec!["Deny LB changes"]);
        assert_eq!(r.first_action(), "-");
        assert!(
            r.summary().starts_with(
                "write denied (RequestDisallowedByPolicy) by Azure Policy assignment(s) Deny LB changes: no role can allow it"
            ),
            "{}",
            r.summary()
        );
        let old = "The resource action 'Microsoft.Network/loadBalancers/write' is disallowed by one or more policies. Policy identifier(s): '/subscriptions/s/providers/Microsoft.Authorization/policyDefinitions/regionPolicyDefinition'.";
        let r = AccessRefusal::of(&http(403, "RequestDisallowedByPolicy", old)).unwrap();
        assert_eq!(r.first_action(), "Microsoft.Network/loadBalancers/write");
        assert_eq!(
            r.policies,
            vec![
                "/subscriptions/s/providers/Microsoft.Authorization/policyDefinitions/regionPolicyDefinition"
            ]
        );
        // Another status than the documented 403: still a policy denial.
        assert!(AccessRefusal::of(&http(400, "RequestDisallowedByPolicy", old)).is_some());
        let bare = AccessRefusal::of(&http(403, "RequestDisallowedByPolicy", "")).unwrap();
        assert!(bare.summary().contains("by an Azure Policy assignment"));
    }

    #[test]
    fn a_read_only_lock_names_the_locked_scope() {
        let m = "The scope '/subscriptions/s/resourceGroups/mc/providers/Microsoft.Network/loadBalancers/k' cannot perform write operation because following scope(s) are locked: '/subscriptions/s/resourceGroups/mc'. Please remove the lock and try again.";
        let r = AccessRefusal::of(&http(409, "ScopeLocked", m)).unwrap();
        assert_eq!(r.kind, AccessKind::Locked);
        assert_eq!(r.locked_scopes, vec!["/subscriptions/s/resourceGroups/mc"]);
        assert!(
            r.summary()
                .contains("ReadOnly management lock on /subscriptions/s/resourceGroups/mc"),
            "{}",
            r.summary()
        );
        assert!(!r.kind.rbac() && AccessKind::Linked.rbac());
        // 409 with another code is not a refusal (a lock conflict is retried, not paused).
        assert!(AccessRefusal::of(&http(409, "AnotherOperationInProgress", m)).is_none());
        assert!(AccessRefusal::of(&http(500, "ScopeLocked", m)).is_none());
    }
}
