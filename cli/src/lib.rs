//! The `llmgov` command's library: a provider model, a discrete-event
//! simulator that measures rate-limit strategies against it, a mock provider
//! server, a capacity planner, and `top`, a terminal view of a governor.

pub mod error;
pub mod plan;
pub mod provider;
pub mod server;
pub mod sim;
pub mod top;

pub use error::CliError;
