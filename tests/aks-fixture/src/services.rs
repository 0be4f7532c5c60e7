//! The load-balancer structure AKS builds for Services of type LoadBalancer: frontend IP
//! configurations (IPv4 and IPv6; public on `<cluster>`, private on `<cluster>-internal`), one
//! load-balancing rule per service port and family with a health probe of the same name, and the
//! outbound rule on `aksOutboundBackendPool`.
//!
//! Names follow cloud-provider-azure: a service's frontends are `a<uid without dashes>` and
//! `a<uid>-IPv6`, its rules and probes `<frontend>-<PROTOCOL>-<port>`; the outbound frontend is
//! named after its managed public IP (a GUID). One service (`kube-system/dns-udp`) carries the
//! `service.beta.kubernetes.io/port_53_no_probe_rule` annotation, so its rule has no probe: admin
//! state has no effect on that rule (Azure admin-state overview), which a writer should report.

use crate::{IpFamily, stable_uuid};

/// Where a frontend's address comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrontendAddress {
    /// A public IP resource (public load balancer).
    Public { public_ip_name: String },
    /// A private address in the node subnet (internal load balancer).
    Private { ip: String },
}

/// A frontend IP configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frontend {
    pub name: String,
    pub family: IpFamily,
    pub address: FrontendAddress,
}

/// A load-balancing rule: one service port of one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbRule {
    pub name: String,
    pub frontend: String,
    pub pool: String,
    /// `Tcp` or `Udp`.
    pub protocol: String,
    pub frontend_port: u16,
    pub backend_port: u16,
    /// The health probe; `None` for a no-probe rule, where admin state has no effect.
    pub probe: Option<String>,
}

/// A health probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub name: String,
    /// `Tcp` or `Http`.
    pub protocol: String,
    pub port: u16,
    pub request_path: Option<String>,
}

/// An outbound (SNAT) rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundRule {
    pub name: String,
    pub frontends: Vec<String>,
    pub pool: String,
}

/// Everything a load balancer carries besides its backend pools.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LbStructure {
    pub frontends: Vec<Frontend>,
    pub rules: Vec<LbRule>,
    pub probes: Vec<Probe>,
    pub outbound_rules: Vec<OutboundRule>,
}

/// A Service of type LoadBalancer placed on one load balancer.
pub(crate) struct ServiceSpec<'a> {
    /// `namespace/name`; the UID (and so every name) derives from it.
    pub key: &'a str,
    /// (protocol, port, nodePort).
    pub ports: &'a [(&'a str, u16, u16)],
    pub dual_stack: bool,
    /// `externalTrafficPolicy: Local` (HTTP probe on the health-check node port).
    pub local: bool,
    pub no_probe: bool,
    /// Backend pools of the v4 and v6 rules.
    pub pools: (&'a str, &'a str),
}

/// The address of an internal frontend: from the top of the node subnet, so it never collides
/// with a node address (nodes count up from the bottom).
fn internal_ip(family: IpFamily, index: usize) -> String {
    let i = u16::try_from(index).unwrap_or(0);
    match family {
        IpFamily::V4 => format!("10.239.255.{}", 250 - i.min(200)),
        IpFamily::V6 => format!("fd00:10:224::ffff:{:x}", 0xfffa - i),
    }
}

impl LbStructure {
    /// Adds a service's frontends, rules and probes.
    pub(crate) fn add_service(&mut self, svc: &ServiceSpec<'_>, internal: bool) {
        let base = format!("a{}", stable_uuid(svc.key).replace('-', ""));
        let families: &[IpFamily] = if svc.dual_stack {
            &[IpFamily::V4, IpFamily::V6]
        } else {
            &[IpFamily::V4]
        };
        for &family in families {
            let (frontend, pool) = match family {
                IpFamily::V4 => (base.clone(), svc.pools.0),
                IpFamily::V6 => (format!("{base}-IPv6"), svc.pools.1),
            };
            let address = if internal {
                FrontendAddress::Private {
                    ip: internal_ip(family, self.frontends.len()),
                }
            } else {
                FrontendAddress::Public {
                    public_ip_name: format!("kubernetes-{frontend}"),
                }
            };
            self.frontends.push(Frontend {
                name: frontend.clone(),
                family,
                address,
            });
            for &(protocol, port, node_port) in svc.ports {
                let name = format!("{frontend}-{}-{port}", protocol.to_ascii_uppercase());
                let probe = (!svc.no_probe).then(|| {
                    self.probes.push(if svc.local {
                        Probe {
                            name: name.clone(),
                            protocol: "Http".into(),
                            port: node_port,
                            request_path: Some("/healthz".into()),
                        }
                    } else {
                        Probe {
                            name: name.clone(),
                            protocol: "Tcp".into(),
                            port: node_port,
                            request_path: None,
                        }
                    });
                    name.clone()
                });
                self.rules.push(LbRule {
                    name,
                    frontend: frontend.clone(),
                    pool: pool.to_owned(),
                    protocol: protocol.to_owned(),
                    frontend_port: port,
                    backend_port: port,
                    probe,
                });
            }
        }
    }

    /// Adds AKS's managed outbound frontend and `aksOutboundRule` on `pool`.
    pub(crate) fn add_outbound(&mut self, pool: &str) {
        let name = stable_uuid("aks-managed-outbound-ip");
        self.frontends.push(Frontend {
            name: name.clone(),
            family: IpFamily::V4,
            address: FrontendAddress::Public {
                public_ip_name: name.clone(),
            },
        });
        self.outbound_rules.push(OutboundRule {
            name: "aksOutboundRule".into(),
            frontends: vec![name],
            pool: pool.to_owned(),
        });
    }

    /// Rules without a health probe (admin state has no effect through them).
    pub fn rules_without_probe(&self) -> impl Iterator<Item = &LbRule> {
        self.rules.iter().filter(|r| r.probe.is_none())
    }
}
