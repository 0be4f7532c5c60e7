//! Azure Resource Manager: a thin client for the few Microsoft.Network calls we make, the
//! shared request budget, retry policy and ID parsing.

pub mod body;
pub mod budget;
pub mod client;
pub mod doc;
pub mod error;
pub mod ids;
pub mod retry;
pub mod scan;
pub mod splice;
pub mod transport;

pub use client::{ArmClient, OpStatus, PutAccepted};
pub use error::ArmError;
