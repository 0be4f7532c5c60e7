//! Azure Resource Manager: a thin client for the few Microsoft.Network calls we make, the
//! shared request budget, retry policy, errors, and the token source the client asks for a
//! bearer token (`token`; `credentials` implements it). Load balancer documents stay bytes
//! here: reading and editing them is `lb`'s job.

pub mod access;
pub mod answer;
pub mod body;
pub mod budget;
pub mod client;
pub mod error;
pub mod permissions;
pub mod retry;
pub mod token;
pub mod transport;

pub use client::{ArmClient, OpStatus, PutAccepted};
pub use error::ArmError;
pub use token::TokenSource;
