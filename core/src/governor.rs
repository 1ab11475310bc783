//! The facade: a ledger plus the clock that times it.

use std::sync::Arc;

use crate::clock::{Clock, MonotonicClock};
use crate::ledger::Ledger;
use crate::{Config, Permit, Request, Result, Route, ScopeId, ScopeSnapshot, Snapshot, Usage};

/// A rate-limit governor: reserve before a request leaves, reconcile after.
///
/// Cloning is cheap and shares the same ledger.
///
/// ```
/// use llmgov::{Governor, Request, Usage};
///
/// let gov = Governor::from_preset("openai-gpt-4o-tier1")?;
/// let route = gov.route(&["openai/org/gpt-4o"])?;
/// let mut permit = gov.try_acquire(&Request::new(route).input_tokens(1200).max_output_tokens(300))?;
/// // … call the provider …
/// gov.settle(&mut permit, Usage::new(1180, 212))?;
/// # Ok::<(), llmgov::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Governor {
    ledger: Arc<Ledger>,
    clock: Arc<dyn Clock>,
}

impl Governor {
    /// A governor on the real monotonic clock.
    pub fn new(config: &Config) -> Result<Self> {
        Self::with_clock(config, Arc::new(MonotonicClock::new()))
    }

    /// A governor on the given clock (a [`crate::ManualClock`] in tests).
    pub fn with_clock(config: &Config, clock: Arc<dyn Clock>) -> Result<Self> {
        Ok(Governor { ledger: Arc::new(Ledger::new(config)?), clock })
    }

    /// A governor from TOML text.
    pub fn from_toml(text: &str) -> Result<Self> {
        Self::new(&Config::from_toml(text)?)
    }

    /// A governor from JSON text.
    pub fn from_json(text: &str) -> Result<Self> {
        Self::new(&Config::from_json(text)?)
    }

    /// A governor from a shipped preset; see [`crate::config::PRESETS`].
    pub fn from_preset(name: &str) -> Result<Self> {
        Self::new(&Config::preset(name)?)
    }

    /// The sans-IO ledger underneath, for callers that bring their own time.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// The clock this governor reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Interns `path`; see [`Ledger::scope_id`].
    pub fn scope_id(&self, path: &str) -> Result<ScopeId> {
        self.ledger.scope_id(path)
    }

    /// Resolves request paths once into a reusable route.
    pub fn route<S: AsRef<str>>(&self, paths: &[S]) -> Result<Route> {
        self.ledger.route(paths)
    }

    /// Reserves every limit on the route now, or nothing. A refusal is
    /// [`crate::Error::RateLimited`] (wait `retry_after`) or
    /// [`crate::Error::NeverFits`] (never retry).
    pub fn try_acquire(&self, request: &Request) -> Result<Permit> {
        self.ledger.try_acquire(request, self.clock.now())
    }

    /// Reconciles a permit with actual usage; see [`Ledger::settle`].
    pub fn settle(&self, permit: &mut Permit, actual: Usage) -> Result<()> {
        self.ledger.settle(permit, actual, self.clock.now())
    }

    /// Refunds a permit whose request was never sent; see [`Ledger::cancel`].
    pub fn cancel(&self, permit: &mut Permit) -> Result<()> {
        self.ledger.cancel(permit, self.clock.now())
    }

    /// Charges streamed output as it arrives; see [`Ledger::add_output`].
    pub fn add_output(&self, permit: &mut Permit, tokens: u64) -> Result<()> {
        self.ledger.add_output(permit, tokens, self.clock.now())
    }

    /// Every scope and counter now.
    pub fn snapshot(&self) -> Snapshot {
        self.ledger.snapshot(self.clock.now())
    }

    /// One scope's limits now.
    pub fn scope_snapshot(&self, id: ScopeId) -> Result<ScopeSnapshot> {
        self.ledger.scope_snapshot(id, self.clock.now())
    }
}
