//! `NativeGovernor`: the core [`Governor`] as an N-API class, for every call
//! off the hot path (construction, routes, snapshots, reports, the clock).
//!
//! The state of each governor lives in a per-thread table ([`with`]), under
//! the number the class exposes as `id`; the hot path (`hot.rs`) reaches it
//! by that number without unwrapping a class instance, which in napi-rs costs
//! more than the whole reservation. Dropping the class (its JavaScript object
//! collected) frees the state.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use llmgov::{ClassId, Config, Governor, ManualClock, PermitState, ProfileRoute, Request, Route};
use napi::{Env, Result};
use napi_derive::napi;

use crate::errors::{invalid, throw, OrThrow};
use crate::events::EventSink;
use crate::feedback::{classify, Classification};
use crate::metrics::{metrics, metrics_json, Metrics};
use crate::numbers::{clock_step, count, millis};
use crate::permits::Permits;
use crate::snapshot::{queue_metrics, snapshot, QueueMetrics, Snapshot};
use crate::tagged;

/// One governor's state: the core governor plus this binding's tables.
pub struct State {
    pub gov: Governor,
    /// Carried by this governor's route and profile numbers (`tagged.rs`).
    pub tag: u64,
    /// Set when the governor runs on a manual clock (tests).
    manual: Option<Arc<ManualClock>>,
    pub routes: Vec<Route>,
    /// The route table's number of each core route, so equal routes share one.
    route_numbers: HashMap<u32, u32>,
    pub classes: Vec<ClassId>,
    pub permits: Permits,
    /// Resolved profiles, by the number JavaScript holds (`routing.rs`).
    pub profiles: Vec<ProfileRoute>,
    /// Where the core's events go, once a listener was set (`events.rs`).
    pub events: Option<Arc<EventSink>>,
}

impl State {
    /// The number JavaScript holds for a core route, interning it on first
    /// sight so that equal routes share one number.
    pub fn route_number(&mut self, route: Route) -> f64 {
        let index = match self.route_numbers.get(&route.index()) {
            Some(&index) => index,
            None => {
                let index = self.routes.len() as u32;
                self.routes.push(route);
                self.route_numbers.insert(route.index(), index);
                index
            }
        };
        tagged::number(self.tag, index as usize)
    }

    /// Class number `number` (from `classId`), as the core's class.
    #[inline]
    pub fn class(&self, number: u32) -> llmgov::Result<ClassId> {
        self.classes
            .get(number as usize)
            .copied()
            .ok_or_else(|| invalid("klass", number, "not a class of this governor"))
    }

    /// The request on `route` that `counts` describe, each count checked.
    #[inline]
    pub fn request(&self, route: Route, counts: Counts) -> llmgov::Result<Request> {
        let mut request = Request::new(route)
            .input_tokens(count("input_tokens", counts.input)?)
            .cached_input_tokens(count("cached_input_tokens", counts.cached_input)?)
            .max_output_tokens(count("max_output_tokens", counts.max_output)?);
        if let Some(expected) = counts.expected_output {
            request.expected_output_tokens = Some(count("expected_output_tokens", expected)?);
        }
        request.class = self.class(counts.class_number)?;
        Ok(request)
    }
}

/// What a request estimates, as every acquiring call passes it: JavaScript
/// numbers, checked by [`State::request`], and the class's number.
pub struct Counts {
    pub input: f64,
    pub cached_input: f64,
    pub max_output: f64,
    pub expected_output: Option<f64>,
    pub class_number: u32,
}

thread_local! {
    /// Every governor made on this thread (JavaScript objects never cross
    /// threads), by id; `None` where one was dropped.
    static GOVERNORS: RefCell<Vec<Option<State>>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on governor `id`'s state; an `invalid_request` if there is none.
#[inline]
pub fn with<R>(id: u32, f: impl FnOnce(&mut State) -> llmgov::Result<R>) -> llmgov::Result<R> {
    GOVERNORS.with(|table| match table.borrow_mut().get_mut(id as usize) {
        Some(Some(state)) => f(state),
        _ => Err(invalid("governor", id, "not a live governor of this thread")),
    })
}

/// A governor, as the JavaScript `Governor` class drives it. Use the
/// package's `Governor`; this class is its engine.
#[napi]
pub struct NativeGovernor {
    id: u32,
}

impl Drop for NativeGovernor {
    fn drop(&mut self) {
        // `try_with`: at thread exit the table may already be gone.
        let _ = GOVERNORS.try_with(|table| {
            if let Some(slot) = table.borrow_mut().get_mut(self.id as usize) {
                *slot = None;
            }
        });
    }
}

/// What a permit holds now, for inspection.
#[napi(object)]
pub struct PermitInfo {
    /// `pending`, `settled`, `cancelled` or `expired`.
    pub state: String,
    /// Input tokens charged (the estimate).
    pub input_tokens: f64,
    /// The part of them expected from the prompt cache.
    pub cached_input_tokens: f64,
    /// Output tokens charged on limits that reserve `max_tokens` (raised by
    /// streamed output beyond it).
    pub output_tokens: f64,
    /// Output tokens charged on limits that reserve the expected output.
    pub expected_output_tokens: f64,
    /// When it was granted, in the governor clock's milliseconds.
    pub acquired_at_ms: f64,
    /// When it expires unless settled, in the governor clock's milliseconds.
    pub expires_at_ms: f64,
}

impl NativeGovernor {
    fn build(env: &Env, config: llmgov::Result<Config>, manual_clock: bool) -> Result<Self> {
        let config = config.or_throw(env)?;
        let (gov, manual) = if manual_clock {
            let clock = Arc::new(ManualClock::new(0));
            (Governor::with_clock(&config, clock.clone()).or_throw(env)?, Some(clock))
        } else {
            (Governor::new(&config).or_throw(env)?, None)
        };
        let state = State {
            gov,
            tag: tagged::next_tag(),
            manual,
            routes: Vec::new(),
            route_numbers: HashMap::new(),
            classes: vec![ClassId::default()],
            permits: Permits::default(),
            profiles: Vec::new(),
            events: None,
        };
        let id = GOVERNORS.with(|table| {
            let mut table = table.borrow_mut();
            match table.iter().position(Option::is_none) {
                Some(free) => {
                    table[free] = Some(state);
                    free
                }
                None => {
                    table.push(Some(state));
                    table.len() - 1
                }
            }
        });
        Ok(NativeGovernor { id: id as u32 })
    }

    /// Runs `f` on this governor's state, throwing its error.
    pub(crate) fn with<R>(&self, env: &Env, f: impl FnOnce(&mut State) -> llmgov::Result<R>) -> Result<R> {
        with(self.id, f).or_throw(env)
    }
}

#[napi]
impl NativeGovernor {
    /// A governor from TOML text; `manualClock` starts a manual clock at 0.
    #[napi(factory, catch_unwind)]
    pub fn from_toml(env: Env, text: String, manual_clock: bool) -> Result<Self> {
        Self::build(&env, Config::from_toml(&text), manual_clock)
    }

    /// A governor from JSON text.
    #[napi(factory, catch_unwind)]
    pub fn from_json(env: Env, text: String, manual_clock: bool) -> Result<Self> {
        Self::build(&env, Config::from_json(&text), manual_clock)
    }

    /// A governor from a shipped preset.
    #[napi(factory, catch_unwind)]
    pub fn from_preset(env: Env, name: String, manual_clock: bool) -> Result<Self> {
        Self::build(&env, Config::preset(&name), manual_clock)
    }

    /// The number the hot-path functions know this governor by.
    #[napi(getter)]
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Resolves paths into a route number, the same for the same scopes.
    #[napi(catch_unwind)]
    pub fn route(&self, env: Env, paths: Vec<String>) -> Result<f64> {
        self.with(&env, |s| {
            let route = s.gov.route(&paths)?;
            Ok(s.route_number(route))
        })
    }

    /// Interns a traffic class by name into a class number (0 is the default).
    #[napi(catch_unwind)]
    pub fn class_id(&self, env: Env, name: String) -> Result<u32> {
        self.with(&env, |s| {
            let class = s.gov.class(&name);
            Ok(match s.classes.iter().position(|c| *c == class) {
                Some(number) => number as u32,
                None => {
                    s.classes.push(class);
                    (s.classes.len() - 1) as u32
                }
            })
        })
    }

    /// Throws the error every call on a permit already reconciled gets:
    /// `permit_finished` (`settled`, `cancelled`) or `permit_expired`.
    #[napi(catch_unwind)]
    pub fn finished(env: Env, state: String) -> Result<()> {
        let error = match state.as_str() {
            "settled" => llmgov::Error::PermitFinished { state: PermitState::Settled },
            "cancelled" => llmgov::Error::PermitFinished { state: PermitState::Cancelled },
            "expired" => llmgov::Error::PermitExpired,
            other => invalid("state", other, "not a finished permit state (settled, cancelled, expired)"),
        };
        Err(throw(&env, error))
    }

    /// What a pending permit holds; `null` once it is reconciled or swept.
    #[napi(catch_unwind)]
    pub fn permit_info(&self, env: Env, handle: f64) -> Result<Option<PermitInfo>> {
        self.with(&env, |s| {
            Ok(s.permits.get(handle).map(|permit| {
                let charged = permit.charged();
                PermitInfo {
                    state: permit.state().to_string(),
                    input_tokens: charged.input_tokens as f64,
                    cached_input_tokens: charged.cached_input_tokens as f64,
                    output_tokens: charged.output_tokens as f64,
                    expected_output_tokens: permit.charged_expected_output() as f64,
                    acquired_at_ms: ns_to_ms(permit.acquired_at()),
                    expires_at_ms: ns_to_ms(permit.expires_at()),
                }
            }))
        })
    }

    /// Classifies a provider's answer to the request of permit `handle` on
    /// `route` and feeds it back into the route's provider scopes. While the
    /// permit is held, the answer is dated by it (a 429 for a request sent
    /// before the last AIMD decrease lowers the rate no further, a failure
    /// sent before a breaker opened does not count again); once it is
    /// reconciled, only the route is known.
    #[napi(catch_unwind)]
    pub fn report(
        &self,
        env: Env,
        handle: f64,
        route: f64,
        status: f64,
        headers: Vec<String>,
        body: String,
    ) -> Result<Classification> {
        let (classification, core) = classify(&env, status, &headers, &body, None, None)?;
        self.with(&env, |s| {
            let route = route_of(s, route)?;
            match s.permits.get(handle) {
                Some(permit) => s.gov.report_classified(permit, &core),
                None => s.gov.observe(route, &core),
            }
        })?;
        Ok(classification)
    }

    /// Every scope and counter now.
    #[napi(catch_unwind)]
    pub fn snapshot(&self, env: Env) -> Result<Snapshot> {
        self.with(&env, |s| Ok(snapshot(&s.gov.snapshot())))
    }

    /// Every limit, counter, breaker and queue now, in the Prometheus text
    /// format (OpenMetrics), for a `/metrics` endpoint.
    #[napi(catch_unwind)]
    pub fn prometheus(&self, env: Env) -> Result<String> {
        self.with(&env, |s| Ok(s.gov.prometheus()))
    }

    /// Everything observable now in one object: the snapshot, the queues,
    /// refusals by dimension and by who refused, estimate errors and retry
    /// amplification.
    #[napi(catch_unwind)]
    pub fn metrics(&self, env: Env) -> Result<Metrics> {
        self.with(&env, |s| Ok(metrics(&s.gov.metrics())))
    }

    /// The same as the core's JSON text (snake_case), unchanged: what
    /// `llmgov top` reads.
    #[napi(catch_unwind)]
    pub fn metrics_json(&self, env: Env) -> Result<String> {
        let core = self.with(&env, |s| Ok(s.gov.metrics()))?;
        metrics_json(&core)
    }

    /// Every traffic class's waiting queue now.
    #[napi(catch_unwind)]
    pub fn queue_metrics(&self, env: Env) -> Result<QueueMetrics> {
        self.with(&env, |s| Ok(queue_metrics(&s.gov.queue_metrics())))
    }

    /// Moves a manual clock forward by `ms` milliseconds, then admits the
    /// waiters that can pass at the new time.
    #[napi(catch_unwind)]
    pub fn advance(&self, env: Env, ms: f64) -> Result<()> {
        self.with(&env, |s| {
            millis("ms", ms)?;
            match &s.manual {
                Some(clock) => {
                    clock.advance(clock_step("ms", ms, s.gov.clock().now())?);
                    s.gov.wake_waiters();
                    Ok(())
                }
                None => Err(invalid("clock", "monotonic", "advance() needs a governor made with { clock: 'manual' }")),
            }
        })
    }

    /// The governor clock's reading, in milliseconds.
    #[napi(catch_unwind)]
    pub fn now_ms(&self, env: Env) -> Result<f64> {
        self.with(&env, |s| Ok(ns_to_ms(s.gov.clock().now())))
    }

    /// Permits handed out and not yet reconciled or swept.
    #[napi(catch_unwind)]
    pub fn live_permits(&self, env: Env) -> Result<u32> {
        self.with(&env, |s| Ok(s.permits.live() as u32))
    }
}

/// The route `number` names, if it is one of governor `s`'s (`tagged.rs`).
#[inline]
pub fn route_of(s: &State, number: f64) -> llmgov::Result<Route> {
    let index = tagged::index("route", s.tag, number)?;
    s.routes.get(index).copied().ok_or_else(|| invalid("route", number, "not a route of this governor"))
}

fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}
