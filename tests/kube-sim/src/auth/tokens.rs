//! Bearer tokens. A token file has kube-apiserver's `--token-auth-file` format, one user a
//! line: `token,user,uid,"group1,group2"` (groups optional). Every authenticated user is
//! also in `system:authenticated`; a request without a token is `system:anonymous` in
//! `system:unauthenticated` (kube-apiserver's default `--anonymous-auth=true`), and an
//! unknown token is refused with 401.

use std::collections::HashMap;

/// The group whose members may do anything (kube-apiserver's privileged group).
pub const MASTERS: &str = "system:masters";

/// An authenticated (or anonymous) caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    /// Which credential authenticated the request, as kube-apiserver's audit log records it
    /// in `user.extra["authentication.kubernetes.io/credential-id"]` (`JTI=<id>` for a
    /// ServiceAccount token; KEP-4193): tells apart two pods of one ServiceAccount, without
    /// the token itself.
    pub credential_id: Option<String>,
}

impl User {
    pub fn anonymous() -> User {
        User {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec!["system:unauthenticated".into()],
            credential_id: None,
        }
    }

    /// A ServiceAccount's identity, as its tokens authenticate.
    pub fn service_account(namespace: &str, name: &str, uid: &str) -> User {
        User {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            uid: uid.to_string(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
            ],
            credential_id: None,
        }
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// One token and whom it authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenEntry {
    pub token: String,
    pub user: User,
}

impl TokenEntry {
    pub fn new(token: &str, name: &str, groups: &[&str]) -> TokenEntry {
        TokenEntry {
            token: token.to_string(),
            user: User {
                name: name.to_string(),
                uid: name.to_string(),
                groups: groups.iter().map(|g| g.to_string()).collect(),
                credential_id: None,
            },
        }
    }
}

/// Parses a token file; `Err` names the first bad line.
pub fn parse_token_file(text: &str) -> Result<Vec<TokenEntry>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields = split_csv(line);
        if fields.len() < 3 || fields[0].is_empty() || fields[1].is_empty() {
            return Err(format!(
                "line {}: want token,user,uid[,\"groups\"], got {line:?}",
                i + 1
            ));
        }
        let groups = fields
            .get(3)
            .map(|g| {
                g.split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        out.push(TokenEntry {
            token: fields[0].clone(),
            user: User {
                name: fields[1].clone(),
                uid: fields[2].clone(),
                groups,
                credential_id: None,
            },
        });
    }
    Ok(out)
}

/// CSV fields with double-quoted fields allowed (for the comma-separated group list).
fn split_csv(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(String::new()),
            c => {
                if let Some(f) = fields.last_mut() {
                    f.push(c);
                }
            }
        }
    }
    fields.into_iter().map(|f| f.trim().to_string()).collect()
}

/// Tokens known to the server.
#[derive(Debug, Default)]
pub struct Authenticator {
    tokens: HashMap<String, User>,
}

/// A request that presented a token nobody issued (401).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unauthorized;

impl Authenticator {
    pub fn add(&mut self, entry: TokenEntry) {
        self.tokens.insert(entry.token, entry.user);
    }

    /// The caller of a request with this `Authorization` header value.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<User, Unauthorized> {
        let Some(header) = authorization else {
            return Ok(User::anonymous());
        };
        let token = header
            .strip_prefix("Bearer ")
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(Unauthorized)?;
        let mut user = self.tokens.get(token).cloned().ok_or(Unauthorized)?;
        if !user.in_group("system:authenticated") {
            user.groups.push("system:authenticated".into());
        }
        Ok(user)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_lines() {
        let entries = parse_token_file(
            "# comment\nt1,alice,1\nt2,bob,2,\"system:masters,dev\"\n\nt3,system:serviceaccount:ns:sa,3,system:serviceaccounts\n",
        )
        .unwrap();
        assert_eq!(entries.len(), 3);
        assert!(entries[0].user.groups.is_empty());
        assert_eq!(entries[1].user.groups, ["system:masters", "dev"]);
        assert_eq!(entries[2].user.name, "system:serviceaccount:ns:sa");
        assert!(parse_token_file("only,two").is_err());
    }

    #[test]
    fn authentication() {
        let mut a = Authenticator::default();
        a.add(TokenEntry::new("secret", "alice", &["dev"]));
        let alice = a.authenticate(Some("Bearer secret")).unwrap();
        assert_eq!(alice.groups, ["dev", "system:authenticated"]);
        assert_eq!(a.authenticate(None).unwrap(), User::anonymous());
        assert_eq!(a.authenticate(Some("Bearer nope")), Err(Unauthorized));
        assert_eq!(a.authenticate(Some("Basic eDp5")), Err(Unauthorized));
    }
}
