//! Certificate identities: the subject alternative names a client certificate presents (DNS
//! names and URIs) and the allow-list entries they are compared with, as the allow-lists
//! (`grpc::auth`) and the per-identity tool rate limit (`inbound::tools::limiter`) read them.
//! Pure.
//!
//! Only SANs are identities. The subject CN is never one, even on a certificate without SANs:
//! a CA that signs CSRs with any CN (the usual case) would otherwise let anyone who can get a
//! certificate name themselves. It is read only to say, in a refusal, what such a certificate
//! claimed.
//!
//! Comparison is exact: a URI entry equals a URI SAN byte for byte; a DNS entry equals a DNS SAN
//! ignoring ASCII case (DNS names are case-insensitive). No prefix, suffix or wildcard match; an
//! entry with `*` is refused when the flags are read, and a wildcard SAN matches only itself.

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// One subject alternative name that can be an identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum San {
    Dns(String),
    Uri(String),
}

impl std::fmt::Display for San {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            San::Dns(d) => write!(f, "DNS:{d}"),
            San::Uri(u) => write!(f, "URI:{u}"),
        }
    }
}

/// What a DER certificate presents: its DNS and URI SANs (the identities), and its subject CN
/// (for log lines only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Presented {
    pub sans: Vec<San>,
    pub common_name: Option<String>,
}

/// Reads a DER certificate; `None` when it does not parse.
pub fn presented(der: &[u8]) -> Option<Presented> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let mut out = Presented::default();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => out.sans.push(San::Dns(d.to_string())),
                GeneralName::URI(u) => out.sans.push(San::Uri(u.to_string())),
                _ => {}
            }
        }
    }
    out.common_name = cert
        .subject()
        .iter_common_name()
        .find_map(|cn| cn.as_str().ok().map(str::to_string));
    Some(out)
}

/// The identities a DER certificate presents: its SAN DNS names and URIs, never the CN.
pub fn identities(der: &[u8]) -> Vec<String> {
    presented(der)
        .map(|p| {
            p.sans
                .into_iter()
                .map(|s| match s {
                    San::Dns(d) | San::Uri(d) => d,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One allow-list entry: a URI (it has a scheme, `spiffe://...`) or a DNS name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allowed {
    Dns(String),
    Uri(String),
}

impl Allowed {
    /// Parses an entry of `--signal-clients` / `--tool-clients`. Refused: empty, whitespace,
    /// wildcards, and DNS names with characters no certificate's DNS SAN has.
    pub fn parse(entry: &str) -> Result<Self, String> {
        if entry.is_empty() {
            return Err("an empty identity".into());
        }
        if entry.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("{entry:?} contains whitespace"));
        }
        if entry.contains('*') {
            return Err(format!(
                "{entry:?} has a wildcard: identities are matched exactly, name each one"
            ));
        }
        if let Some((scheme, rest)) = entry.split_once("://") {
            let scheme_ok = scheme
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
            if !scheme_ok || rest.is_empty() {
                return Err(format!(
                    "{entry:?} is not a URI (e.g. spiffe://cluster.local/ns/cutover/sa/signal-svc)"
                ));
            }
            return Ok(Allowed::Uri(entry.to_string()));
        }
        let dns_ok = entry.split('.').all(|label| {
            !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
        if !dns_ok {
            return Err(format!(
                "{entry:?} is neither a DNS name (signal-svc.cutover.svc) nor a URI (spiffe://...)"
            ));
        }
        Ok(Allowed::Dns(entry.to_string()))
    }

    /// Whether `san` is this identity, exactly.
    pub fn matches(&self, san: &San) -> bool {
        match (self, san) {
            (Allowed::Uri(a), San::Uri(s)) => a == s,
            (Allowed::Dns(a), San::Dns(s)) => a.eq_ignore_ascii_case(s),
            _ => false,
        }
    }
}

impl std::fmt::Display for Allowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Allowed::Dns(d) => write!(f, "DNS:{d}"),
            Allowed::Uri(u) => write!(f, "URI:{u}"),
        }
    }
}

/// Parses a whole list, naming the flag and the entry on error; empty entries (`--flag=`) are
/// skipped.
pub fn parse_list(flag: &str, entries: &[String]) -> Result<Vec<Allowed>, String> {
    entries
        .iter()
        .map(|e| e.trim())
        .filter(|e| !e.is_empty())
        .map(|e| Allowed::parse(e).map_err(|why| format!("{flag}: {why}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(sans: Vec<rcgen::SanType>, cn: Option<&str>) -> Vec<u8> {
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

    #[test]
    fn identities_are_the_sans_never_the_cn() {
        let der = cert(
            vec![
                rcgen::SanType::DnsName("signal-svc.cutover.svc".try_into().unwrap()),
                rcgen::SanType::URI("spiffe://cluster/ns/cutover/sa/signal".try_into().unwrap()),
            ],
            Some("signal"),
        );
        assert_eq!(
            identities(&der),
            vec![
                "signal-svc.cutover.svc",
                "spiffe://cluster/ns/cutover/sa/signal"
            ]
        );
        let p = presented(&der).unwrap();
        assert_eq!(p.common_name.as_deref(), Some("signal"));
        // A CN alone is no identity.
        let cn_only = cert(vec![], Some("signal-svc.cutover.svc"));
        assert!(identities(&cn_only).is_empty());
        assert_eq!(
            presented(&cn_only).unwrap().common_name.as_deref(),
            Some("signal-svc.cutover.svc")
        );
        assert!(identities(b"not a certificate").is_empty());
        assert!(presented(b"not a certificate").is_none());
    }

    #[test]
    fn entries_match_exactly() {
        let dns = Allowed::parse("signal-svc.cutover.svc").unwrap();
        assert!(dns.matches(&San::Dns("signal-svc.cutover.svc".into())));
        assert!(dns.matches(&San::Dns("Signal-Svc.cutover.svc".into())));
        for other in [
            "signal-svc.cutover.svc.evil.example",
            "x.signal-svc.cutover.svc",
            "signal-svc.cutover",
            "signal-svc.cutover.svc.",
        ] {
            assert!(!dns.matches(&San::Dns(other.into())), "{other}");
        }
        // A DNS entry never matches a URI SAN with the same text, nor the reverse.
        assert!(!dns.matches(&San::Uri("signal-svc.cutover.svc".into())));
        let uri = Allowed::parse("spiffe://cluster.local/ns/cutover/sa/signal-svc").unwrap();
        assert!(uri.matches(&San::Uri(
            "spiffe://cluster.local/ns/cutover/sa/signal-svc".into()
        )));
        for other in [
            "spiffe://cluster.local/ns/cutover/sa/signal-svc-2",
            "spiffe://cluster.local/ns/cutover/sa/signal-sv",
            "spiffe://cluster.local/ns/cutover/sa/signal-svc/x",
            "SPIFFE://cluster.local/ns/cutover/sa/signal-svc",
        ] {
            assert!(!uri.matches(&San::Uri(other.into())), "{other}");
        }
        // A wildcard SAN is only its own text.
        assert!(!dns.matches(&San::Dns("*.cutover.svc".into())));
    }

    #[test]
    fn entries_refused_name_the_flag() {
        for bad in [
            "",
            "*.cutover.svc",
            "a b",
            "spiffe://",
            "://x",
            "a..b",
            "a/b",
        ] {
            assert!(Allowed::parse(bad).is_err(), "{bad:?}");
        }
        let e =
            parse_list("--tool-clients", &["ok.example".into(), "*.example".into()]).unwrap_err();
        assert!(
            e.contains("--tool-clients") && e.contains("wildcard"),
            "{e}"
        );
    }
}
