//! Permits: the caller's handle on a reservation, and the request that made it.

use super::registry::RouteId;
use crate::dimension::{too_many_tokens, MAX_TOKENS};
use crate::Usage;

/// Where a permit stands. Only a pending permit can be reconciled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PermitState {
    /// Reserved; the request may be in flight.
    Pending,
    /// Reconciled with actual usage.
    Settled,
    /// Refunded in full: the request was never sent.
    Cancelled,
    /// Outlived its TTL unsettled: charged as estimated, concurrency freed.
    Expired,
}

impl std::fmt::Display for PermitState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PermitState::Pending => "pending",
            PermitState::Settled => "settled",
            PermitState::Cancelled => "cancelled",
            PermitState::Expired => "expired",
        })
    }
}

/// The scopes a request is charged on: every scope on each of its paths,
/// each once, interned by the ledger that resolved it. Resolve it once with
/// [`crate::Governor::route`] and reuse it. It is a plain pair of numbers,
/// valid only with the governor that made it (others refuse it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    pub(crate) ledger: u32,
    pub(crate) id: RouteId,
}

impl Route {
    /// The route's number, for bindings that cache routes by path.
    pub fn index(&self) -> u32 {
        self.id.0
    }
}

/// A traffic class, interned by [`crate::Governor::class`]. Output lengths
/// are learned per route and class; `ClassId::default()` is the unnamed
/// class every request is in unless it says otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ClassId(pub(crate) u32);

/// What a request asks to reserve.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// Where to charge it.
    pub route: Route,
    /// Estimated prompt tokens, cached ones included.
    pub input_tokens: u64,
    /// Part of `input_tokens` expected to be read from the prompt cache.
    pub cached_input_tokens: u64,
    /// The request's `max_tokens`: the output reserved on limits that
    /// reserve `max_tokens`, and a cap on the expected output. 0: the
    /// request states none (providers refuse `max_tokens = 0`), so limits
    /// that reserve `max_tokens` reserve no output until it streams or
    /// settles, and the [`crate::Governor`] reserves the learned quantile,
    /// else `output.default_max_tokens`, on limits that reserve the expected.
    pub max_output_tokens: u64,
    /// The output expected (e.g. a quantile of this route's past outputs),
    /// reserved instead of `max_output_tokens` on limits configured with
    /// `reserve_output = "expected"`. `None` reserves `max_output_tokens`,
    /// unless the [`crate::Governor`] has learned this route and class.
    pub expected_output_tokens: Option<u64>,
    /// The request's traffic class.
    pub class: ClassId,
    /// Order among the waiting requests of one tenant in one class: higher
    /// first, then first come (default 0). Only waiting uses it.
    pub priority: i32,
    /// The longest [`crate::Governor::acquire`] may wait, from the call;
    /// the class's maximum wait caps it. `None`: the class's maximum wait.
    pub deadline: Option<std::time::Duration>,
}

impl Request {
    /// A request on `route` reserving nothing but a request (and a
    /// concurrency slot); add tokens with the builder methods.
    pub fn new(route: Route) -> Self {
        Request {
            route,
            input_tokens: 0,
            cached_input_tokens: 0,
            max_output_tokens: 0,
            expected_output_tokens: None,
            class: ClassId::default(),
            priority: 0,
            deadline: None,
        }
    }

    /// Sets the request's priority among its tenant's waiting requests.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Sets how long [`crate::Governor::acquire`] may wait for it, from the call.
    pub fn deadline(mut self, deadline: std::time::Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Sets the estimated prompt tokens.
    pub fn input_tokens(mut self, n: u64) -> Self {
        self.input_tokens = n;
        self
    }

    /// Sets the part of the prompt expected from cache.
    pub fn cached_input_tokens(mut self, n: u64) -> Self {
        self.cached_input_tokens = n;
        self
    }

    /// Sets the output tokens to reserve.
    pub fn max_output_tokens(mut self, n: u64) -> Self {
        self.max_output_tokens = n;
        self
    }

    /// Sets the output expected, reserved where limits reserve the expected
    /// output rather than `max_tokens`.
    pub fn expected_output_tokens(mut self, n: u64) -> Self {
        self.expected_output_tokens = Some(n);
        self
    }

    /// Puts the request in a traffic class.
    pub fn class(mut self, class: ClassId) -> Self {
        self.class = class;
        self
    }

    /// What limits that reserve the expected output reserve: never more
    /// than `max_output_tokens`, where the request states one.
    #[inline]
    pub(crate) fn expected_output(&self) -> u64 {
        match (self.expected_output_tokens, self.max_output_tokens) {
            (None, max) => max,
            (Some(expected), 0) => expected,
            (Some(expected), max) => expected.min(max),
        }
    }

    /// Checks the counts: each within [`crate::dimension::MAX_TOKENS`], the
    /// cached part within the input.
    #[inline]
    pub(crate) fn validate(&self) -> crate::Result<()> {
        self.estimate().validate()?;
        match self.expected_output_tokens {
            Some(expected) if expected > MAX_TOKENS => Err(too_many_tokens("expected_output_tokens", expected)),
            _ => Ok(()),
        }
    }

    /// The `max_tokens` the request states, if any.
    pub(crate) fn stated_max_output(&self) -> Option<u64> {
        (self.max_output_tokens > 0).then_some(self.max_output_tokens)
    }

    #[inline]
    pub(crate) fn estimate(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens,
            cached_input_tokens: self.cached_input_tokens,
            output_tokens: self.max_output_tokens,
        }
    }
}

/// A granted reservation. Settle it with actual usage, or cancel it if the
/// request was never sent; left alone, it expires after the permit TTL,
/// charged as estimated. A permit reconciles once.
#[derive(Debug)]
pub struct Permit {
    pub(crate) route: Route,
    pub(crate) class: ClassId,
    /// The request's estimate at admission. What is charged is this, raised
    /// by streamed output beyond it (see [`Self::charged`]); kept apart so
    /// that the estimate's accuracy is judged on the estimate.
    pub(crate) estimate: Usage,
    /// The expected output at admission, reserved on limits that reserve it.
    pub(crate) expected_output: u64,
    /// Output reported by [`crate::Governor::add_output`] so far.
    pub(crate) streamed_output: u64,
    pub(crate) acquired_at: u64,
    /// The permit-TTL slot it was admitted in (kept, not recomputed at settle).
    pub(crate) ttl_slot: u64,
    pub(crate) expires_at: u64,
    pub(crate) state: PermitState,
    /// Whether it went as the probe of an open breaker: cancelled, it gives
    /// the probe back.
    pub(crate) probe: bool,
}

impl Permit {
    /// Where the permit stands.
    pub fn state(&self) -> PermitState {
        self.state
    }

    /// What is charged so far on its behalf (on limits that reserve
    /// `max_tokens`; see [`Self::charged_expected_output`] for the others).
    pub fn charged(&self) -> Usage {
        Usage { output_tokens: self.estimate.output_tokens.max(self.streamed_output), ..self.estimate }
    }

    /// The output charged so far on limits that reserve the expected output.
    pub fn charged_expected_output(&self) -> u64 {
        self.expected_output.max(self.streamed_output)
    }

    /// The request's estimate at admission (input, cached input, and
    /// `max_tokens` as output), whatever streamed output charged since.
    pub fn estimate(&self) -> Usage {
        self.estimate
    }

    /// The output expected at admission (`max_tokens` where nothing was
    /// expected), whatever streamed output charged since.
    pub fn expected_output(&self) -> u64 {
        self.expected_output
    }

    /// When it was granted, in the governor clock's nanoseconds.
    pub fn acquired_at(&self) -> u64 {
        self.acquired_at
    }

    /// When it expires if not reconciled, in the governor clock's nanoseconds:
    /// after the permit TTL, and within TTL/16 of it.
    pub fn expires_at(&self) -> u64 {
        self.expires_at
    }

    /// The route it is charged on.
    pub fn route(&self) -> Route {
        self.route
    }

    /// The traffic class of its request.
    pub fn class(&self) -> ClassId {
        self.class
    }
}
