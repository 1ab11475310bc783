//! The facade: a ledger plus the clock that times it.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::clock::{Clock, MonotonicClock};
use crate::events::{Event, EventHook, Events};
use crate::feedback::{classify_response, Classification, ProviderHint};
use crate::ledger::permit::ClassId;
use crate::ledger::Ledger;
use crate::scheduler::{Acquire, QueueMetrics, Waiting};
use crate::tokens::{Accuracy, ErrorSummary, OutputModel, Side};
use crate::{Config, EstimateError, Metrics, Permit, Request, Result, Route, ScopeId, ScopeSnapshot, Snapshot, Usage};

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
    learning: Arc<Learning>,
    /// Queues of requests waiting for admission ([`crate::scheduler`]).
    waiting: Arc<Waiting>,
    /// The application's event hook, if it set one.
    events: Arc<Events>,
    /// Model profiles by name, for [`Self::profile`].
    pub(crate) profiles: Arc<std::collections::BTreeMap<String, crate::config::ProfileConfig>>,
}

/// What settled usage teaches: output lengths per route and class, for
/// limits that reserve the expected output (read at every acquire), and how
/// far estimates were from actual usage, per route.
#[derive(Debug)]
struct Learning {
    outputs: OutputModel<Route>,
    accuracy: Accuracy<Route>,
    /// Class names by id; id 0 is the unnamed default class.
    names: boxcar::Vec<Box<str>>,
    ids: papaya::HashMap<Box<str>, ClassId>,
}

impl Learning {
    fn new(config: &Config) -> Result<Self> {
        let outputs = OutputModel::new(config.output.clone().unwrap_or_default())?;
        let learning = Learning {
            accuracy: Accuracy::new(outputs.config().half_life),
            outputs,
            names: boxcar::Vec::new(),
            ids: papaya::HashMap::new(),
        };
        learning.names.push("".into());
        Ok(learning)
    }

    fn class(&self, name: &str) -> ClassId {
        let ids = self.ids.pin();
        if let Some(id) = ids.get(name) {
            return *id;
        }
        // Racing twins may both push; the map keeps one id, the other name
        // stays unused.
        let index = self.names.push(name.into());
        *ids.get_or_insert(name.into(), ClassId(u32::try_from(index).expect("more than 4 billion classes")))
    }

    fn name(&self, class: ClassId) -> &str {
        self.names.get(class.0 as usize).map_or("", |n| n)
    }
}

impl Governor {
    /// A governor on the real monotonic clock.
    pub fn new(config: &Config) -> Result<Self> {
        Self::with_clock(config, Arc::new(MonotonicClock::new()))
    }

    /// A governor on the given clock (a [`crate::ManualClock`] in tests).
    pub fn with_clock(config: &Config, clock: Arc<dyn Clock>) -> Result<Self> {
        let (ledger, learning) = (Arc::new(Ledger::new(config)?), Arc::new(Learning::new(config)?));
        let events = Arc::new(Events::default());
        let profiles = Arc::new(config.profiles.clone());
        Ok(Governor { ledger, clock, learning, waiting: Arc::new(Waiting::new(config)?), events, profiles })
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

    /// The name of an interned traffic class (empty for the default class).
    pub(crate) fn class_name(&self, class: ClassId) -> &str {
        self.learning.name(class)
    }

    /// Interns a traffic class by name, for [`Request::class`].
    pub fn class(&self, name: &str) -> ClassId {
        self.learning.class(name)
    }

    /// What a request on `route` in `class` reserves for its output on
    /// limits with `reserve_output = "expected"`: min(`max_tokens`, the
    /// learned quantile), `max_tokens` until there is enough history, and the
    /// configured `output.default_max_tokens` when a request has no
    /// `max_tokens` either (never the model's whole context).
    ///
    /// Output lengths are learned per provider part of the route (see
    /// [`Ledger::provider_route`]) and class: every tenant's route to one
    /// provider shares them, so a million tenants cost no more than one.
    pub fn expected_output(&self, route: Route, class: ClassId, max_tokens: Option<u64>) -> u64 {
        let key = self.ledger.provider_route(route);
        self.learning.outputs.reservation(key, self.learning.name(class), max_tokens)
    }

    /// Reserves every limit on the route now, or nothing. A refusal is
    /// [`crate::Error::RateLimited`] (wait `retry_after`) or
    /// [`crate::Error::NeverFits`] (never retry). Where limits reserve the
    /// expected output and the request names none, the learned one is used.
    pub fn try_acquire(&self, request: &Request) -> Result<Permit> {
        let result = self.reserve(request, Ledger::try_acquire);
        if let Err(error) = &result {
            self.denied(error, request);
        }
        result
    }

    /// [`Self::try_acquire`] counting and telling of no refusal: routing
    /// tries several deployments and reports only the request's final
    /// refusal (with [`Self::refused`]).
    pub(crate) fn try_acquire_quietly(&self, request: &Request) -> Result<Permit> {
        self.reserve(request, Ledger::try_acquire_uncounted)
    }

    /// Counts a refusal that [`Self::try_acquire_quietly`] left uncounted,
    /// and tells the hook.
    #[cold]
    pub(crate) fn refused(&self, error: &crate::Error, request: &Request) {
        self.ledger.count_refusal(error);
        self.denied(error, request);
    }

    #[inline]
    fn reserve(&self, request: &Request, acquire: impl Fn(&Ledger, &Request, u64) -> Result<Permit>) -> Result<Permit> {
        let now = self.clock.now();
        // One call, on either request: `acquire` is inlined whole.
        let with_expected;
        let request = if self.ledger.reserves_expected_output() && request.expected_output_tokens.is_none() {
            let expected = self.expected_output(request.route, request.class, request.stated_max_output());
            with_expected = Request { expected_output_tokens: Some(expected), ..*request };
            &with_expected
        } else {
            request
        };
        acquire(&self.ledger, request, now)
    }

    /// Counts a refusal and tells `tracing` and the hook.
    #[cold]
    fn denied(&self, error: &crate::Error, request: &Request) {
        self.events.denied(error, self.learning.name(request.class));
    }

    /// Sets the hook told of every [`Event`]: local denials, provider
    /// rejections and breaker changes. It runs on the thread where the event
    /// happened, never while anything is held; a governor takes one hook
    /// (set it once, at start-up), and a second is refused.
    ///
    /// ```
    /// # use llmgov::{Governor, Request, events::Event};
    /// # use std::sync::{Arc, Mutex};
    /// let gov = Governor::from_toml(r#"
    ///     [scopes."openai/gpt-4o"]
    ///     limits = [{ dimension = "requests", amount = 1, window = "1m" }]
    /// "#)?;
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let log = seen.clone();
    /// gov.set_event_hook(Arc::new(move |event: &Event| log.lock().unwrap().push(event.clone())))?;
    /// let route = gov.route(&["openai/gpt-4o"])?;
    /// let _permit = gov.try_acquire(&Request::new(route))?;
    /// assert!(gov.try_acquire(&Request::new(route)).is_err());
    /// assert!(matches!(&seen.lock().unwrap()[0], Event::Denied { code: "rate_limited", .. }));
    /// # Ok::<(), llmgov::Error>(())
    /// ```
    pub fn set_event_hook(&self, hook: EventHook) -> Result<()> {
        self.events.set(hook)
    }

    /// Reconciles a permit with actual usage (see [`Ledger::settle`]) and,
    /// where limits reserve the expected output, learns from it.
    pub fn settle(&self, permit: &mut Permit, actual: Usage) -> Result<()> {
        // Judged on the estimate, not on what streamed output raised it to.
        let (estimate, expected) = (permit.estimate(), permit.expected_output());
        self.ledger.settle(permit, actual, self.clock.now())?;
        let (learning, route) = (&self.learning, self.ledger.provider_route(permit.route()));
        let input = (estimate.input_tokens, actual.input_tokens);
        learning.accuracy.record_request(route, input, (expected, actual.output_tokens));
        if self.ledger.reserves_expected_output() {
            learning.outputs.record(route, learning.name(permit.class()), actual.output_tokens);
        }
        self.waiting.kick(&self.ledger, &*self.clock);
        Ok(())
    }

    /// How far settled requests on `route` were from their estimates: the
    /// input estimate, and the output reserved (the expected output, or
    /// `max_tokens` where nothing was expected), as relative errors. Kept per
    /// provider part of the route, as the learned output is.
    pub fn estimate_accuracy(&self, route: Route, side: Side) -> Option<ErrorSummary> {
        self.learning.accuracy.summary(self.ledger.provider_route(route), side)
    }

    /// Feeds a provider's answer (already classified) to a request on
    /// `route` back into the route's provider scopes; see [`Ledger::observe`].
    /// Call it for successes too: their headers keep the buckets honest.
    pub fn observe(&self, route: Route, feedback: &Classification) -> Result<usize> {
        self.feed_back(route, feedback, None)
    }

    /// Feeds an answer back, tells the hook what changed, and lets waiters
    /// see the capacity it moved.
    fn feed_back(&self, route: Route, feedback: &Classification, sent_at: Option<u64>) -> Result<usize> {
        let _span = tracing::debug_span!("llmgov.feed_back", limited = feedback.limited).entered();
        let mut changes = Vec::new();
        let updated = self.ledger.feed_back_noting(route, feedback, sent_at, self.clock.now(), &mut changes)?;
        if feedback.limited {
            tracing::debug!(kind = ?feedback.kind, dimension = ?feedback.dimension, "provider refused a request");
            self.events.tally.rejected(feedback);
            if self.events.hooked() {
                self.events.rejected(feedback, self.ledger.provider_paths(route));
            }
        }
        for change in changes {
            let state = if change.open { "open" } else { "closed" };
            tracing::info!(scope = %change.scope, state, "llmgov circuit breaker");
            self.events.emit(Event::BreakerChanged { scope: change.scope.to_string(), state });
        }
        self.waiting.kick(&self.ledger, &*self.clock);
        Ok(updated)
    }

    /// Classifies a provider's answer to `permit`'s request and feeds it
    /// back (see [`Self::observe`]). Reads the wall clock, for resets given
    /// as dates; settle or cancel the permit as usual afterwards.
    pub fn report<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        permit: &Permit,
        status: u16,
        headers: &[(K, V)],
        body: &[u8],
    ) -> Result<Classification> {
        self.report_sent(permit.route(), permit.acquired_at(), status, headers, body)
    }

    /// As [`Self::report`], for the request of a permit on `route` granted
    /// at `acquired_at` ([`Permit::acquired_at`]): for bindings that keep
    /// the permit behind a lock they must not hold while the event hook
    /// (the caller's code) runs.
    pub fn report_sent<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        route: Route,
        acquired_at: u64,
        status: u16,
        headers: &[(K, V)],
        body: &[u8],
    ) -> Result<Classification> {
        let wall_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let feedback = classify_response(status, headers, body, ProviderHint::Auto, wall_ms);
        self.feed_back(route, &feedback, Some(acquired_at))?;
        Ok(feedback)
    }

    /// Feeds an answer already classified back for `permit`'s request: as
    /// [`Self::observe`], but dated by the permit, so that the 429s of
    /// requests sent before the last decrease lower the rate only once.
    pub fn report_classified(&self, permit: &Permit, feedback: &Classification) -> Result<usize> {
        self.feed_back(permit.route(), feedback, Some(permit.acquired_at()))
    }

    /// Feeds an answer already classified back for a request on `route`
    /// sent at `sent_at` (on this governor's clock): [`Self::report_classified`]
    /// for a caller that admitted the request elsewhere and holds no permit
    /// of this governor's. A breaker whose pause was over when it was sent
    /// takes its answer as the probe's.
    pub fn observe_sent(&self, route: Route, sent_at: u64, feedback: &Classification) -> Result<usize> {
        self.feed_back(route, feedback, Some(sent_at))
    }

    /// When the circuit breaker of provider scope `path` lets a request
    /// through again; see [`Ledger::breaker_open_until`].
    pub fn breaker_open_until(&self, path: &str) -> Option<u64> {
        self.ledger.breaker_open_until(path)
    }

    /// Refunds a permit whose request was never sent; see [`Ledger::cancel`].
    pub fn cancel(&self, permit: &mut Permit) -> Result<()> {
        self.ledger.cancel(permit, self.clock.now())?;
        self.waiting.kick(&self.ledger, &*self.clock);
        Ok(())
    }

    /// Charges streamed output as it arrives; see [`Ledger::add_output`].
    pub fn add_output(&self, permit: &mut Permit, tokens: u64) -> Result<()> {
        self.ledger.add_output(permit, tokens, self.clock.now())
    }

    /// Waits fairly for admission: resolves to a [`Permit`] once the
    /// request is admitted, or to [`crate::Error::DeadlineExceeded`],
    /// [`crate::Error::QueueFull`] or [`crate::Error::NeverFits`]. Dropping
    /// the future leaves the queue (a permit granted at that moment is
    /// cancelled). Waiters are served by class priority, guarantee, then
    /// deficit round robin across tenants; see [`crate::scheduler`]. The
    /// request's deadline counts from this call. The future runs on any
    /// executor, is `Send + 'static`, and is woken by settles, cancels and
    /// the governor's timer thread (on a [`crate::ManualClock`], call
    /// [`Self::wake_waiters`] after advancing it).
    ///
    /// ```
    /// # use llmgov::{Governor, Request, Usage};
    /// # use std::time::Duration;
    /// let gov = Governor::from_toml(r#"
    ///     [scopes."openai/gpt-4o"]
    ///     limits = [{ dimension = "tokens", amount = 30000, window = "1m" }]
    /// "#)?;
    /// let route = gov.route(&["openai/gpt-4o"])?;
    /// let request = Request::new(route)
    ///     .input_tokens(1200)
    ///     .max_output_tokens(300)
    ///     .class(gov.class("interactive"))
    ///     .deadline(Duration::from_secs(5));
    /// # let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// # runtime.block_on(async {
    /// let mut permit = gov.acquire(&request).await?;
    /// // … call the provider …
    /// gov.settle(&mut permit, Usage::new(1180, 212))?;
    /// # Ok::<(), llmgov::Error>(())
    /// # })?;
    /// # Ok::<(), llmgov::Error>(())
    /// ```
    pub fn acquire(&self, request: &Request) -> Acquire {
        match self.enter(request, None) {
            Ok(Ok(permit)) => Acquire::admitted(crate::scheduler::Admitted {
                permit,
                waiting: self.waiting.clone(),
                ledger: self.ledger.clone(),
                clock: self.clock.clone(),
            }),
            Ok(Err(guard)) => Acquire::waiting(guard),
            Err(error) => {
                self.denied(&error, request);
                Acquire::refused(error)
            }
        }
    }

    /// Waits as [`Self::acquire`] does, parking the calling thread, for at
    /// most `timeout` (and the request's deadline, and its class's maximum
    /// wait). Timing out is [`crate::Error::DeadlineExceeded`].
    pub fn acquire_blocking(&self, request: &Request, timeout: Option<std::time::Duration>) -> Result<Permit> {
        let _span =
            tracing::debug_span!("llmgov.acquire_blocking", class = self.learning.name(request.class)).entered();
        match self.enter(request, timeout) {
            Ok(Ok(permit)) => Ok(permit),
            // The guard tells of a refusal after waiting itself.
            Ok(Err(guard)) => guard.wait(),
            Err(error) => {
                self.denied(&error, request);
                Err(error)
            }
        }
    }

    /// `request`, with the output it is expected to use where limits reserve that.
    fn with_expected_output(&self, request: &Request) -> Request {
        let mut request = *request;
        if self.ledger.reserves_expected_output() && request.expected_output_tokens.is_none() {
            let expected = self.expected_output(request.route, request.class, request.stated_max_output());
            request.expected_output_tokens = Some(expected);
        }
        request
    }

    /// How long `request` would wait if queued now, counting the line
    /// already waiting; `None` while nobody waits.
    pub(crate) fn predicted_wait(&self, request: &Request) -> Result<Option<std::time::Duration>> {
        let request = self.with_expected_output(request);
        let name = self.learning.name(request.class);
        let wait = self.waiting.predicted_wait(&self.ledger, &*self.clock, &request, name)?;
        Ok(wait.map(std::time::Duration::from_nanos))
    }

    /// Queues a request: its permit if admitted at once, else its guard.
    fn enter(
        &self,
        request: &Request,
        timeout: Option<std::time::Duration>,
    ) -> Result<std::result::Result<Permit, crate::scheduler::Guard>> {
        let request = self.with_expected_output(request);
        let name = self.learning.name(request.class);
        match self.waiting.enter(&self.ledger, &self.clock, request, name, timeout)? {
            crate::scheduler::Entry::Admitted(permit) => Ok(Ok(permit)),
            crate::scheduler::Entry::Waiting(id, slot) => Ok(Err(crate::scheduler::Guard {
                waiting: self.waiting.clone(),
                ledger: self.ledger.clone(),
                clock: self.clock.clone(),
                id,
                slot,
                events: self.events.clone(),
                class: name.into(),
                answered: false,
                span: tracing::debug_span!("llmgov.wait", class = name, outcome = tracing::field::Empty),
            })),
        }
    }

    /// Polls the waiting queues at the clock's time now: admits whoever can
    /// pass and refuses whoever's deadline came. Call it after moving a
    /// [`crate::ManualClock`], or after changing limits; settles, cancels and
    /// the timer thread call it otherwise. Returns how long until the next
    /// time-driven change (a refill, a deadline), if any.
    pub fn wake_waiters(&self) -> Option<std::time::Duration> {
        let next = self.waiting.poll_now(&self.ledger, &*self.clock)?;
        Some(std::time::Duration::from_nanos(next.saturating_sub(self.clock.now())))
    }

    /// The waiting queues now: depth, oldest waiter's age, admitted,
    /// expired and refused counts, per traffic class.
    pub fn queue_metrics(&self) -> QueueMetrics {
        self.waiting.metrics(&self.ledger, &*self.clock)
    }

    /// Every limit, counter, breaker and queue now, in the Prometheus text
    /// format (OpenMetrics), for an application's `/metrics` endpoint: the
    /// [`Self::metrics`] in another form.
    pub fn prometheus(&self) -> String {
        crate::prometheus::exposition(&self.metrics())
    }

    /// Everything observable now in one value, serializable as JSON: the
    /// snapshot, the queues, refusals by dimension and by who refused,
    /// estimate errors and retry amplification. `llmgov top` reads its JSON.
    pub fn metrics(&self) -> Metrics {
        let mut estimate_errors = Vec::new();
        for route in self.learning.accuracy.routes() {
            let Ok(scopes) = self.ledger.route_scopes(route) else { continue };
            let paths: Vec<String> =
                scopes.iter().filter_map(|&id| self.ledger.scope_path(id).ok()).map(str::to_owned).collect();
            for (side, name) in [(Side::Input, "input"), (Side::Output, "output")] {
                if let Some(error) = self.learning.accuracy.summary(route, side) {
                    estimate_errors.push(EstimateError { scopes: paths.clone(), side: name, error });
                }
            }
        }
        let snapshot = self.snapshot();
        Metrics {
            retry_amplification: Metrics::amplification(&snapshot),
            snapshot,
            queues: self.queue_metrics(),
            refusals: self.events.tally.counts(),
            estimate_errors,
        }
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
