//! ARM path parsing (pure). Segment keywords are matched case-insensitively, as ARM does.

/// A recognised ARM route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArmPath {
    Lb {
        sub: String,
        rg: String,
        lb: String,
    },
    PoolList {
        sub: String,
        rg: String,
        lb: String,
    },
    Pool {
        sub: String,
        rg: String,
        lb: String,
        pool: String,
    },
    NicList {
        sub: String,
        rg: String,
    },
    OpStatus {
        sub: String,
        location: String,
        id: String,
    },
    OpResult {
        sub: String,
        location: String,
        id: String,
    },
    /// `GET {scope}/providers/Microsoft.Authorization/permissions` at a subscription, resource
    /// group or resource scope (azure-production.md 2.1).
    Permissions {
        sub: String,
        scope: String,
    },
}

impl ArmPath {
    pub fn sub(&self) -> &str {
        match self {
            Self::Lb { sub, .. }
            | Self::PoolList { sub, .. }
            | Self::Pool { sub, .. }
            | Self::NicList { sub, .. }
            | Self::OpStatus { sub, .. }
            | Self::OpResult { sub, .. }
            | Self::Permissions { sub, .. } => sub,
        }
    }
}

/// Why a path is not served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathError {
    /// Not an ARM resource path we know.
    NotFound,
    /// A provider namespace or resource type the simulator does not register.
    UnknownType { sub: String, rtype: String },
}

fn eq(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// Parses `/subscriptions/...`.
pub fn parse(path: &str) -> Result<ArmPath, PathError> {
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            url::form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        })
        .collect();
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    let owned = |x: &str| x.to_owned();
    if let [subs, sub, .., p, ns, perms] = s.as_slice()
        && eq(subs, "subscriptions")
        && eq(p, "providers")
        && eq(ns, "Microsoft.Authorization")
        && eq(perms, "permissions")
    {
        let scope = format!("/{}", s[..s.len() - 3].join("/"));
        return Ok(ArmPath::Permissions {
            sub: owned(sub),
            scope,
        });
    }
    match s.as_slice() {
        [subs, sub, p, ns, locs, loc, ops, id]
            if eq(subs, "subscriptions")
                && eq(p, "providers")
                && eq(ns, "Microsoft.Network")
                && eq(locs, "locations") =>
        {
            if eq(ops, "operations") {
                Ok(ArmPath::OpStatus {
                    sub: owned(sub),
                    location: owned(loc),
                    id: owned(id),
                })
            } else if eq(ops, "operationResults") {
                Ok(ArmPath::OpResult {
                    sub: owned(sub),
                    location: owned(loc),
                    id: owned(id),
                })
            } else {
                Err(PathError::UnknownType {
                    sub: owned(sub),
                    rtype: format!("locations/{ops}"),
                })
            }
        }
        [subs, sub, rgs, rg, p, ns, rest @ ..]
            if eq(subs, "subscriptions") && eq(rgs, "resourceGroups") && eq(p, "providers") =>
        {
            if !eq(ns, "Microsoft.Network") {
                let rtype = rest
                    .first()
                    .map(|t| format!("{ns}/{t}"))
                    .unwrap_or_else(|| ns.to_string());
                return Err(PathError::UnknownType {
                    sub: owned(sub),
                    rtype,
                });
            }
            let (sub, rg) = (owned(sub), owned(rg));
            match rest {
                [t] if eq(t, "networkInterfaces") => Ok(ArmPath::NicList { sub, rg }),
                [t, lb] if eq(t, "loadBalancers") => Ok(ArmPath::Lb {
                    sub,
                    rg,
                    lb: owned(lb),
                }),
                [t, lb, c] if eq(t, "loadBalancers") && eq(c, "backendAddressPools") => {
                    Ok(ArmPath::PoolList {
                        sub,
                        rg,
                        lb: owned(lb),
                    })
                }
                [t, lb, c, pool] if eq(t, "loadBalancers") && eq(c, "backendAddressPools") => {
                    Ok(ArmPath::Pool {
                        sub,
                        rg,
                        lb: owned(lb),
                        pool: owned(pool),
                    })
                }
                [t, ..] if !(eq(t, "loadBalancers") || eq(t, "networkInterfaces")) => {
                    Err(PathError::UnknownType {
                        sub,
                        rtype: format!("Microsoft.Network/{t}"),
                    })
                }
                _ => Err(PathError::NotFound),
            }
        }
        _ => Err(PathError::NotFound),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_routes_case_insensitively() {
        let p = parse("/subscriptions/s/resourcegroups/RG/providers/microsoft.network/loadbalancers/lb/backendaddresspools/kubernetes-IPv6").unwrap();
        assert_eq!(
            p,
            ArmPath::Pool {
                sub: "s".into(),
                rg: "RG".into(),
                lb: "lb".into(),
                pool: "kubernetes-IPv6".into()
            }
        );
        assert!(matches!(
            parse(
                "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/loadBalancers/lb"
            )
            .unwrap(),
            ArmPath::Lb { .. }
        ));
        assert!(matches!(
            parse(
                "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces"
            )
            .unwrap(),
            ArmPath::NicList { .. }
        ));
        assert!(matches!(
            parse("/subscriptions/s/providers/Microsoft.Network/locations/eastus/operations/abc")
                .unwrap(),
            ArmPath::OpStatus { .. }
        ));
        assert!(matches!(
            parse("/subscriptions/s/resourceGroups/rg/providers/Microsoft.Foo/bars/x"),
            Err(PathError::UnknownType { .. })
        ));
        assert!(matches!(
            parse(
                "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/publicIPAddresses/x"
            ),
            Err(PathError::UnknownType { .. })
        ));
        assert_eq!(parse("/subscriptions/s/nothing"), Err(PathError::NotFound));
        assert_eq!(
            parse("/subscriptions/s/resourcegroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/x/providers/microsoft.authorization/permissions").unwrap(),
            ArmPath::Permissions {
                sub: "s".into(),
                scope: "/subscriptions/s/resourcegroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/x".into()
            }
        );
        assert_eq!(
            parse("/subscriptions/s/providers/Microsoft.Authorization/permissions").unwrap(),
            ArmPath::Permissions {
                sub: "s".into(),
                scope: "/subscriptions/s".into()
            }
        );
        assert_eq!(
            parse(
                "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/loadBalancers/lb/backendAddressPools/p/x"
            ),
            Err(PathError::NotFound)
        );
        let p = parse(
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/loadBalancers/my%20lb",
        )
        .unwrap();
        assert_eq!(
            p,
            ArmPath::Lb {
                sub: "s".into(),
                rg: "rg".into(),
                lb: "my lb".into()
            }
        );
    }
}
