//! The resource store: subscriptions, resource groups, load balancers, NICs and scale sets,
//! keyed case-insensitively like ARM. Pure state; the HTTP layer uses it under one lock.

use crate::errors::ArmError;
use crate::model::{LoadBalancer, Nic, NicIpConfiguration};
use crate::seed::SeedVnet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A VMSS Uniform scale set (kept for seeds; its NICs are not in the resource-group NIC list).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Vmss {
    pub name: String,
    #[serde(default)]
    pub instances: Vec<VmssInstance>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmssInstance {
    pub instance_id: u32,
    #[serde(default)]
    pub computer_name: String,
    pub nic_name: String,
    #[serde(default)]
    pub ip_configurations: Vec<NicIpConfiguration>,
}

#[derive(Debug, Clone)]
pub struct ResourceGroup {
    pub name: String,
    pub location: String,
    /// Keyed by lower-cased name (ARM names are case-insensitive).
    pub lbs: BTreeMap<String, LoadBalancer>,
    pub nics: BTreeMap<String, Nic>,
    pub vnets: Vec<SeedVnet>,
    pub vmss: Vec<Vmss>,
}

#[derive(Debug, Clone)]
pub struct Subscription {
    pub id: String,
    pub rgs: BTreeMap<String, ResourceGroup>,
}

#[derive(Debug, Clone, Default)]
pub struct Store {
    pub subs: BTreeMap<String, Subscription>,
    /// GET bodies of load balancers as rendered since their last change, by lower-cased
    /// (subscription, group, LB): a read of an unchanged LB sends the same bytes again, so a
    /// 16 MB document costs one render per change, not one per read, and the simulator does
    /// not compete with the services for the cores at 5,000 nodes. Every mutable access goes
    /// through [`Store::rg_mut`], which drops the group's bodies.
    rendered: BTreeMap<(String, String, String), bytes::Bytes>,
    /// How many LB bodies were rendered (tests check that unchanged reads render nothing).
    pub lb_renders: u64,
}

/// Identifies a load balancer (as stored: display names).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct LbKey {
    pub sub: String,
    pub rg: String,
    pub lb: String,
}

impl Store {
    pub fn sub(&self, sub: &str) -> Result<&Subscription, ArmError> {
        self.subs
            .get(&sub.to_ascii_lowercase())
            .ok_or_else(|| ArmError::subscription_not_found(sub))
    }

    pub fn rg(&self, sub: &str, rg: &str) -> Result<&ResourceGroup, ArmError> {
        self.sub(sub)?
            .rgs
            .get(&rg.to_ascii_lowercase())
            .ok_or_else(|| ArmError::resource_group_not_found(rg))
    }

    pub fn rg_mut(&mut self, sub: &str, rg: &str) -> Result<&mut ResourceGroup, ArmError> {
        let (s, g) = (sub.to_ascii_lowercase(), rg.to_ascii_lowercase());
        self.rendered
            .retain(|(ks, kg, _), _| !(*ks == s && *kg == g));
        self.subs
            .get_mut(&sub.to_ascii_lowercase())
            .ok_or_else(|| ArmError::subscription_not_found(sub))?
            .rgs
            .get_mut(&rg.to_ascii_lowercase())
            .ok_or_else(|| ArmError::resource_group_not_found(rg))
    }

    pub fn lb(&self, sub: &str, rg: &str, lb: &str) -> Result<&LoadBalancer, ArmError> {
        self.rg(sub, rg)?
            .lbs
            .get(&lb.to_ascii_lowercase())
            .ok_or_else(|| ArmError::lb_not_found(rg, lb))
    }

    pub fn lb_mut(&mut self, sub: &str, rg: &str, lb: &str) -> Result<&mut LoadBalancer, ArmError> {
        self.rg_mut(sub, rg)?
            .lbs
            .get_mut(&lb.to_ascii_lowercase())
            .ok_or_else(|| ArmError::lb_not_found(rg, lb))
    }

    /// The GET body of a load balancer and its etag, rendered only when it changed since the
    /// last read.
    pub fn lb_body(
        &mut self,
        sub: &str,
        rg: &str,
        lb: &str,
    ) -> Result<(bytes::Bytes, String), ArmError> {
        let key = (
            sub.to_ascii_lowercase(),
            rg.to_ascii_lowercase(),
            lb.to_ascii_lowercase(),
        );
        let names = self.lb_key(sub, rg, lb)?;
        let l = self.lb(sub, rg, lb)?;
        let etag = l.etag.clone();
        if let Some(body) = self.rendered.get(&key) {
            return Ok((body.clone(), etag));
        }
        let body = bytes::Bytes::from(l.render_bytes(&names.sub, &names.rg));
        self.lb_renders += 1;
        self.rendered.insert(key, body.clone());
        Ok((body, etag))
    }

    /// The stored key (display casing) of a load balancer.
    pub fn lb_key(&self, sub: &str, rg: &str, lb: &str) -> Result<LbKey, ArmError> {
        let s = self.sub(sub)?;
        let g = self.rg(sub, rg)?;
        let l = self.lb(sub, rg, lb)?;
        Ok(LbKey {
            sub: s.id.clone(),
            rg: g.name.clone(),
            lb: l.name.clone(),
        })
    }

    /// Every load balancer, for lookups by name only (control API).
    pub fn find_lb(&self, name: &str) -> Option<LbKey> {
        self.subs.values().find_map(|s| {
            s.rgs.values().find_map(|g| {
                g.lbs.get(&name.to_ascii_lowercase()).map(|l| LbKey {
                    sub: s.id.clone(),
                    rg: g.name.clone(),
                    lb: l.name.clone(),
                })
            })
        })
    }
}
