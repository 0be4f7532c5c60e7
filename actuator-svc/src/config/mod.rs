//! Configuration: the cloud-provider-azure `azure.json` and our flags.

pub mod azure_json;
pub mod cli;
pub mod cloud;
