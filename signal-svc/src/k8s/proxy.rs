//! Whether the Kubernetes client reaches the API server through an HTTP proxy.
//!
//! AKS's HTTP proxy feature injects `HTTP_PROXY`, `HTTPS_PROXY` and `NO_PROXY` (upper and lower
//! case) into every pod; its `NO_PROXY` normally covers the API server (its FQDN and IP, the
//! service CIDR). kube 5 reads `HTTPS_PROXY` from a kubeconfig's environment but checks
//! `NO_PROXY` against the *proxy's* URL rather than the API server's, and ignores the proxy
//! variables altogether for an in-cluster config. So the route is decided here, once at start,
//! from the API server URL the config names (in a pod: `https://$KUBERNETES_SERVICE_HOST:…`),
//! with hyper-util's curl-rule matcher (the one actuator-svc's ARM client uses): `NO_PROXY` may
//! hold host names (covering sub-domains), IP addresses, CIDRs and `*`; `HTTPS_PROXY` applies to
//! an `https` server, `HTTP_PROXY` to an `http` one, `ALL_PROXY` to both. A `proxy-url` written
//! in the kubeconfig itself wins, as with kubectl. The tunnel is kube's own (`http-proxy`
//! feature: hyper-util's CONNECT connector, the same HTTP stack).
//!
//! The gRPC streams to actuator-svc do not take any proxy: tonic's channel connects directly
//! whatever the environment says (actuators are in-cluster Services, which AKS's default
//! `NO_PROXY` covers anyway).

use hyper_util::client::proxy::matcher::Matcher;

/// The proxy variables as read from the environment (first set of upper / lower case).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyEnv {
    pub all: String,
    pub http: String,
    pub https: String,
    pub no: String,
}

impl ProxyEnv {
    /// Reads `ALL_PROXY`, `HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY` (then their lower-case forms).
    pub fn from_env() -> Self {
        let first = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| std::env::var(n).ok())
                .unwrap_or_default()
        };
        ProxyEnv {
            all: first(&["ALL_PROXY", "all_proxy"]),
            http: first(&["HTTP_PROXY", "http_proxy"]),
            https: first(&["HTTPS_PROXY", "https_proxy"]),
            no: first(&["NO_PROXY", "no_proxy"]),
        }
    }

    fn any_proxy(&self) -> bool {
        [&self.all, &self.http, &self.https]
            .iter()
            .any(|v| !v.trim().is_empty())
    }

    fn matcher(&self) -> Matcher {
        Matcher::builder()
            .all(self.all.as_str())
            .http(self.http.as_str())
            .https(self.https.as_str())
            .no(self.no.as_str())
            .build()
    }

    /// The value kube 5 takes from the environment for a kubeconfig (`HTTPS_PROXY` only).
    fn kube_env_value(&self) -> Option<hyper::Uri> {
        let v = self.https.trim();
        if v.is_empty() { None } else { v.parse().ok() }
    }

    /// The proxy URL for a destination scheme, credentials kept (kube sends them as
    /// `Proxy-Authorization: Basic`); a URL without scheme means `http://`, as curl reads it.
    fn proxy_url(&self, scheme: &str) -> Option<hyper::Uri> {
        let own = if scheme == "https" {
            &self.https
        } else {
            &self.http
        };
        [own, &self.all].into_iter().find_map(|raw| {
            let raw = raw.trim();
            if raw.is_empty() {
                return None;
            }
            let with_scheme = if raw.contains("://") {
                raw.to_string()
            } else {
                format!("http://{raw}")
            };
            let uri: hyper::Uri = with_scheme.parse().ok()?;
            match uri.scheme_str() {
                Some("http" | "https" | "socks5" | "socks5h" | "socks4" | "socks4a") => {}
                _ => return None,
            }
            uri.authority()?;
            Some(uri)
        })
    }
}

/// What [`route`] decided, for the start-up log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// No proxy variable set (and none in the kubeconfig).
    NoProxyConfigured,
    /// A proxy is configured, but not for this server: `NO_PROXY` covers it, or no variable
    /// names a proxy for its scheme.
    Direct,
    /// Through the proxy at this `host:port` (never its credentials).
    ViaProxy(String),
    /// The kubeconfig's own `proxy-url` (`host:port`), kept as kube set it.
    KubeconfigProxy(String),
}

fn host_port(uri: &hyper::Uri) -> String {
    let Some(authority) = uri.authority() else {
        return String::new();
    };
    let a = authority.as_str();
    a.rsplit_once('@').map_or(a, |(_, hp)| hp).to_string()
}

/// Sets `config.proxy_url` for the API server `config.cluster_url` from `env`.
pub fn route(config: &mut kube::Config, env: &ProxyEnv) -> Route {
    if let Some(set) = &config.proxy_url
        && env.kube_env_value().as_ref() != Some(set)
    {
        return Route::KubeconfigProxy(host_port(set));
    }
    if !env.any_proxy() {
        config.proxy_url = None;
        return Route::NoProxyConfigured;
    }
    let server = &config.cluster_url;
    // hyper-util 0.1.21 applies a `*` entry to host names only, not to an IP address.
    let everything = env.no.split(',').any(|e| e.trim() == "*");
    let intercept = if everything {
        None
    } else {
        env.matcher().intercept(server)
    };
    match intercept {
        None => {
            config.proxy_url = None;
            Route::Direct
        }
        Some(_) => match env.proxy_url(server.scheme_str().unwrap_or("https")) {
            Some(proxy) => {
                let hp = host_port(&proxy);
                config.proxy_url = Some(proxy);
                Route::ViaProxy(hp)
            }
            None => {
                config.proxy_url = None;
                Route::Direct
            }
        },
    }
}

/// [`route`] with the process environment, logging the decision once.
pub fn route_from_env(config: &mut kube::Config) {
    let server = config.cluster_url.to_string();
    match route(config, &ProxyEnv::from_env()) {
        Route::NoProxyConfigured => {}
        Route::Direct => {
            tracing::info!(%server, "Kubernetes API server reached directly: NO_PROXY covers it (or no proxy for its scheme)");
        }
        Route::ViaProxy(proxy) => tracing::info!(
            %server,
            %proxy,
            "Kubernetes API server reached through the HTTP proxy (CONNECT): NO_PROXY does not cover it"
        ),
        Route::KubeconfigProxy(proxy) => {
            tracing::info!(%server, %proxy, "Kubernetes API server reached through the kubeconfig's proxy-url");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn config(server: &str) -> kube::Config {
        kube::Config::new(server.parse().unwrap())
    }

    fn env(https: &str, no: &str) -> ProxyEnv {
        ProxyEnv {
            https: https.into(),
            no: no.into(),
            ..Default::default()
        }
    }

    #[test]
    fn no_variables_means_direct() {
        let mut c = config("https://10.0.0.1:443");
        assert_eq!(
            route(&mut c, &ProxyEnv::default()),
            Route::NoProxyConfigured
        );
        assert!(c.proxy_url.is_none());
    }

    #[test]
    fn no_proxy_covering_the_server_by_ip_cidr_or_domain_goes_direct() {
        for no in [
            "10.0.0.1",
            "localhost,10.0.0.0/16",
            "*",
            " 192.168.0.0/16 , 10.0.0.1 ",
        ] {
            let mut c = config("https://10.0.0.1:443");
            // kube put the env proxy there, as it does for a kubeconfig
            c.proxy_url = Some("http://proxy.corp:3128".parse().unwrap());
            let r = route(&mut c, &env("http://proxy.corp:3128", no));
            assert_eq!(r, Route::Direct, "NO_PROXY={no}");
            assert!(c.proxy_url.is_none(), "NO_PROXY={no}");
        }
        let mut c = config("https://myaks-dns-abc.hcp.eastus.azmk8s.io:443");
        let r = route(&mut c, &env("http://proxy.corp:3128", "azmk8s.io"));
        assert_eq!(r, Route::Direct);
    }

    #[test]
    fn no_proxy_matching_only_the_proxy_does_not_bypass_it() {
        // kube 5's own check would drop the proxy here (it tests the proxy's URL).
        let mut c = config("https://10.0.0.1:443");
        let r = route(&mut c, &env("http://127.0.0.2:3128", "127.0.0.2"));
        assert_eq!(r, Route::ViaProxy("127.0.0.2:3128".into()));
        assert_eq!(
            c.proxy_url.unwrap().to_string(),
            "http://127.0.0.2:3128/".to_string()
        );
    }

    #[test]
    fn in_cluster_config_takes_the_proxy_when_no_proxy_misses_the_service_ip() {
        // kube's in-cluster config never sets proxy_url
        let mut c = config("https://[fd00::1]:443");
        let r = route(&mut c, &env("proxy.corp:3128", "10.0.0.0/16"));
        assert_eq!(r, Route::ViaProxy("proxy.corp:3128".into()));
        assert_eq!(c.proxy_url.unwrap().scheme_str(), Some("http"));
        let mut c = config("https://[fd00::1]:443");
        let r = route(&mut c, &env("proxy.corp:3128", "fd00::/8"));
        assert_eq!(r, Route::Direct);
    }

    #[test]
    fn credentials_are_kept_for_kube_but_never_shown() {
        let mut c = config("https://10.0.0.1:443");
        let r = route(&mut c, &env("http://user:p%40ss@proxy.corp:3128", ""));
        assert_eq!(r, Route::ViaProxy("proxy.corp:3128".into()));
        assert_eq!(
            c.proxy_url.unwrap().authority().unwrap().as_str(),
            "user:p%40ss@proxy.corp:3128"
        );
    }

    #[test]
    fn scheme_picks_the_variable_and_all_proxy_is_the_fallback() {
        let e = ProxyEnv {
            http: "http://plain:8080".into(),
            all: "http://every:1080".into(),
            ..Default::default()
        };
        let mut c = config("http://10.0.0.1:8080");
        assert_eq!(route(&mut c, &e), Route::ViaProxy("plain:8080".into()));
        let mut c = config("https://10.0.0.1:443");
        assert_eq!(route(&mut c, &e), Route::ViaProxy("every:1080".into()));
        let e = ProxyEnv {
            http: "http://plain:8080".into(),
            ..Default::default()
        };
        let mut c = config("https://10.0.0.1:443");
        assert_eq!(route(&mut c, &e), Route::Direct);
    }

    #[test]
    fn a_kubeconfig_proxy_url_is_kept() {
        let mut c = config("https://10.0.0.1:443");
        c.proxy_url = Some("http://explicit:3128".parse().unwrap());
        let r = route(&mut c, &env("http://proxy.corp:3128", "10.0.0.1"));
        assert_eq!(r, Route::KubeconfigProxy("explicit:3128".into()));
        assert!(c.proxy_url.is_some());
    }
}
