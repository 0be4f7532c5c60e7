//! Bearer tokens issued by the simulated Azure AD / managed-identity endpoints and checked on
//! every ARM call. Tokens are opaque random strings (clients never decode ARM access tokens);
//! each remembers its principal (the throttling key), expiry and audience (the scope or resource
//! it was asked for). ARM checks the audience only when told which it accepts
//! ([`Tokens::set_accepted_audiences`], `ArmSim::set_accepted_audiences`): a sovereign cloud's ARM
//! takes only its own (azure-production.md 3.3).

use crate::errors::ArmError;
use std::collections::HashMap;

#[derive(Debug, Clone)]
struct Issued {
    principal: String,
    expires_at: jiff::Timestamp,
    /// The scope asked for without `/.default`, or the managed-identity `resource`.
    audience: String,
}

#[derive(Debug, Default)]
pub struct Tokens {
    issued: HashMap<String, Issued>,
    /// `None`: any audience (the default).
    accepted_audiences: Option<Vec<String>>,
}

/// An audience as compared: no trailing `/`, lower case.
fn norm(audience: &str) -> String {
    audience.trim().trim_end_matches('/').to_ascii_lowercase()
}

impl Tokens {
    /// Issues a token for `principal` valid for `lifetime_secs` from `now`.
    pub fn issue(
        &mut self,
        principal: &str,
        lifetime_secs: u64,
        now: jiff::Timestamp,
    ) -> (String, jiff::Timestamp) {
        let token = format!(
            "armsim.{}.{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let expires_at = now
            .checked_add(jiff::SignedDuration::from_secs(
                i64::try_from(lifetime_secs).unwrap_or(i64::MAX / 2),
            ))
            .unwrap_or(jiff::Timestamp::MAX);
        self.issued.insert(
            token.clone(),
            Issued {
                principal: principal.to_owned(),
                expires_at,
                audience: String::new(),
            },
        );
        (token, expires_at)
    }

    /// Records what `token` was issued for: a scope (`/.default` is dropped) or a resource.
    pub fn set_audience(&mut self, token: &str, scope_or_resource: &str) {
        if let Some(t) = self.issued.get_mut(token) {
            let first = scope_or_resource.split(' ').next().unwrap_or_default();
            t.audience = first.trim_end_matches("/.default").to_owned();
        }
    }

    /// The audiences ARM accepts (`None`: any). ARM answers any other 401
    /// `InvalidAuthenticationTokenAudience`.
    pub fn set_accepted_audiences(&mut self, audiences: Option<Vec<String>>) {
        self.accepted_audiences = audiences;
    }

    /// The audiences ARM accepts, when restricted.
    pub fn accepted_audiences(&self) -> Option<&[String]> {
        self.accepted_audiences.as_deref()
    }

    /// Checks an `Authorization` header; returns the principal.
    pub fn verify(&self, header: Option<&str>, now: jiff::Timestamp) -> Result<String, ArmError> {
        let header = header.ok_or_else(ArmError::missing_auth_header)?;
        let mut parts = header.splitn(2, ' ');
        let scheme = parts.next().unwrap_or_default();
        let token = parts.next().map(str::trim).unwrap_or_default();
        if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
            return Err(ArmError::bad_auth_header());
        }
        let issued = self.issued.get(token).ok_or_else(ArmError::invalid_token)?;
        if now >= issued.expires_at {
            return Err(ArmError::expired_token(
                &issued.expires_at.to_string(),
                &now.to_string(),
            ));
        }
        if let Some(accepted) = &self.accepted_audiences
            && !accepted.iter().any(|a| norm(a) == norm(&issued.audience))
        {
            return Err(ArmError::wrong_audience(&issued.audience, accepted));
        }
        Ok(issued.principal.clone())
    }

    /// Expires every token of a principal at once (token-expiry tests).
    pub fn expire_all(&mut self, now: jiff::Timestamp) {
        for t in self.issued.values_mut() {
            t.expires_at = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audiences_are_checked_only_when_configured() {
        let mut t = Tokens::default();
        let now = jiff::Timestamp::now();
        let (china, _) = t.issue("p", 60, now);
        t.set_audience(&china, "https://management.chinacloudapi.cn/.default");
        let (public, _) = t.issue("p", 60, now);
        t.set_audience(&public, "https://management.azure.com/.default");
        let bearer = |tok: &str| format!("Bearer {tok}");
        assert!(t.verify(Some(&bearer(&public)), now).is_ok());
        t.set_accepted_audiences(Some(vec![
            "https://management.core.chinacloudapi.cn".into(),
            "https://management.chinacloudapi.cn/".into(),
        ]));
        assert!(t.verify(Some(&bearer(&china)), now).is_ok());
        let e = t.verify(Some(&bearer(&public)), now).unwrap_err();
        assert_eq!(e.status.as_u16(), 401);
        assert_eq!(e.code, "InvalidAuthenticationTokenAudience");
    }

    #[test]
    fn tokens_verify_and_expire() {
        let mut t = Tokens::default();
        let now = jiff::Timestamp::from_second(1_000_000).unwrap();
        let (tok, _) = t.issue("client-a", 60, now);
        assert_eq!(
            t.verify(Some(&format!("Bearer {tok}")), now).unwrap(),
            "client-a"
        );
        assert_eq!(
            t.verify(None, now).unwrap_err().code,
            "AuthenticationFailed"
        );
        assert_eq!(
            t.verify(Some("Basic abc"), now).unwrap_err().code,
            "AuthenticationFailed"
        );
        assert_eq!(
            t.verify(Some("Bearer nope"), now).unwrap_err().code,
            "InvalidAuthenticationToken"
        );
        let later = now
            .checked_add(jiff::SignedDuration::from_secs(61))
            .unwrap();
        let e = t.verify(Some(&format!("Bearer {tok}")), later).unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.code.as_str()),
            (401, "InvalidAuthenticationToken")
        );
        assert!(
            e.message.contains("ExpiredAuthenticationToken"),
            "{}",
            e.message
        );
    }
}
