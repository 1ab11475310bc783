//! The `llmgov` command's library: a provider model, a discrete-event
//! simulator that measures rate-limit strategies against it, a mock provider
//! server, and a capacity planner.

pub mod error;
pub mod plan;
pub mod provider;
pub mod server;
pub mod sim;

pub use error::CliError;
