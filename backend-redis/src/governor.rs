//! [`RedisGovernor`]: the core's governor for local scopes, Redis for
//! shared ones, and the safe local share while Redis is away.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use llmgov::{Clock, Config, Governor, Ledger, MonotonicClock, Permit, Request, Route, Usage};
use parking_lot::Mutex;

use crate::errors::{Error, Result};
use crate::health::{Health, HealthState};
use crate::heartbeat::Heartbeat;
use crate::lease::LocalLease;
use crate::outage::OutageDebt;
use crate::settings::{redact, Mode, RedisConfig, Settings};
use crate::shared::{self, Charge, Kind, SharedScope};
use crate::store::{Admission, Ask, Reconcile, Store};

const DEFAULT_PERMIT_TTL: Duration = Duration::from_secs(600);

/// A governor whose shared scopes are enforced across processes through
/// Redis; see the crate docs.
pub struct RedisGovernor {
    pub(crate) inner: Arc<Inner>,
    /// The background keeper, if any scope needs one; restarted in a forked child.
    pub(crate) keeper: Mutex<Option<Heartbeat>>,
    /// The fork generation this governor last ran in (see [`crate::fork`]).
    pub(crate) generation: AtomicU64,
}

/// Where a request's scopes are enforced; resolve once, reuse.
#[derive(Debug, Clone)]
pub struct SharedRoute {
    /// The governor that resolved it: its shared scopes are indices there.
    owner: u64,
    /// The route in the whole config, which prices its requests.
    catalog: Route,
    local: Option<Route>,
    fallback: Option<Route>,
    shared: Box<[usize]>,
}

/// A granted reservation: settle or cancel it once.
#[derive(Debug)]
pub struct SharedPermit {
    /// The governor that granted it.
    owner: u64,
    local: Option<Permit>,
    fallback: Option<Permit>,
    /// With `fallback`: the shared scopes it stood in for, and the estimate.
    outage: Option<(Box<[usize]>, Charge)>,
    /// Its route in the whole config, which prices its usage.
    catalog: Route,
    holds: Vec<Hold>,
    reconciled: bool,
    /// When it expires unsettled, on this process's clock: a local part's
    /// own expiry, else the permit TTL from the acquire.
    expires_at: u64,
}

impl SharedPermit {
    /// Whether the shared part came from the safe local share (Redis was away).
    pub fn from_fallback(&self) -> bool {
        self.fallback.is_some()
    }
}

/// One shared scope's reservation in Redis.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) scope: usize,
    /// The local lease's generation, in leased mode.
    pub(crate) lease: Option<i64>,
    pub(crate) epoch: String,
    pub(crate) slot: Option<String>,
    pub(crate) reserved: Vec<u64>,
}

pub(crate) struct Inner {
    /// Random id of this governor, carried by its routes and permits.
    owner: u64,
    pub(crate) settings: Settings,
    pub(crate) scopes: Vec<SharedScope>,
    index: HashMap<String, usize>,
    /// The configured scopes (no `*`) that price their requests: each half
    /// of a route is priced by them, wherever they are enforced.
    priced: HashSet<String>,
    pub(crate) catalog: Ledger,
    local: Governor,
    fallback: Governor,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) store: Store,
    /// Random id of this process's slots and leases (a new one after fork).
    pub(crate) process_id: Mutex<Arc<str>>,
    next_slot: AtomicU64,
    permit_ttl_ns: u64,
    /// The state epoch each shared scope had when this process last saw it.
    pub(crate) epochs: Vec<Mutex<Option<String>>>,
    /// Concurrency slots held per shared scope, with when their permit expires.
    pub(crate) held: Vec<Mutex<HashMap<String, u64>>>,
    /// This process's lease per shared scope (used by leased scopes).
    pub(crate) leases: Vec<LocalLease>,
    /// What the safe share admitted while Redis was away, owed to Redis.
    pub(crate) outage: OutageDebt,
    pub(crate) health: HealthState,
}

impl RedisGovernor {
    /// Builds from a TOML config: the core's sections plus `[redis]` (see
    /// [`crate::settings`]). A missing `redis.url` is read from `LLMGOV_REDIS_URL`.
    pub fn from_toml(text: &str) -> Result<Self> {
        Self::from_toml_with_clock(text, Arc::new(MonotonicClock::new()))
    }

    /// As [`RedisGovernor::from_toml`], with the clock that decides local
    /// limits, permit expiry and reconnection pacing (Redis limits use Redis `TIME`).
    pub fn from_toml_with_clock(text: &str, clock: Arc<dyn Clock>) -> Result<Self> {
        let value: serde_json::Value =
            toml::from_str(text).map_err(|e| Error::config("<toml>", "", e.message().to_owned()))?;
        Self::from_value_with_clock(value, clock)
    }

    /// As [`RedisGovernor::from_toml_with_clock`], from the config already
    /// parsed into its JSON form (the core's sections plus a `redis` object),
    /// for callers that hold the config as data rather than TOML text.
    pub fn from_value_with_clock(mut value: serde_json::Value, clock: Arc<dyn Clock>) -> Result<Self> {
        let section = value.as_object_mut().and_then(|table| table.remove("redis")).ok_or_else(|| {
            Error::config("redis", "", "missing: a [redis] section names the server and shared scopes")
        })?;
        let raw: RedisConfig = serde_path_to_error::deserialize(section).map_err(section_error)?;
        let settings = Settings::compile(raw, std::env::var("LLMGOV_REDIS_URL").ok())?;
        let config = Config::from_value(value)?;
        Self::new(config, settings, clock)
    }

    /// Builds from a parsed core config and validated settings.
    pub fn new(config: Config, settings: Settings, clock: Arc<dyn Clock>) -> Result<Self> {
        // The whole config first: its errors (a bad budget, say) are the core's.
        let catalog = Ledger::new(&config)?;
        let scopes = shared::compile(&config, &settings)?;
        let index = scopes.iter().enumerate().map(|(i, s)| (s.path.to_string(), i)).collect();
        let priced = config
            .scopes
            .iter()
            .filter(|(path, scope)| scope.pricing.is_some() && !path.contains('*'))
            .map(|(path, _)| path.clone())
            .collect();
        let permit_ttl_ns = match &config.permit_ttl {
            Some(text) => humantime::parse_duration(text)
                .map_err(|e| Error::config("permit_ttl", text, e.to_string()))?
                .as_nanos() as u64,
            None => DEFAULT_PERMIT_TTL.as_nanos() as u64,
        };
        let store = Store::new(client(&settings)?, settings.timeout, clock.clone());
        let inner = Arc::new(Inner {
            owner: rand::random(),
            catalog,
            local: Governor::with_clock(&shared::local_config(&config, &settings), clock.clone())?,
            fallback: Governor::with_clock(&shared::fallback_config(&config, &settings), clock.clone())?,
            clock,
            store,
            process_id: Mutex::new(random_id()),
            next_slot: AtomicU64::new(0),
            permit_ttl_ns,
            epochs: scopes.iter().map(|_| Mutex::new(None)).collect(),
            held: scopes.iter().map(|_| Mutex::new(HashMap::new())).collect(),
            leases: scopes.iter().map(|s| LocalLease::new(s.limits.len())).collect(),
            outage: OutageDebt::new(&scopes),
            health: HealthState::default(),
            index,
            priced,
            scopes,
            settings,
        });
        crate::fork::watch();
        let generation = AtomicU64::new(crate::fork::generation());
        let keeper = Mutex::new(inner.start_keeper());
        Ok(RedisGovernor { inner, keeper, generation })
    }

    /// Resolves request paths (and their configured ancestors) into local
    /// and shared parts.
    pub fn route<S: AsRef<str>>(&self, paths: &[S]) -> Result<SharedRoute> {
        let inner = &self.inner;
        let all = inner.catalog.route(paths)?;
        let (mut local, mut shared) = (Vec::new(), Vec::new());
        // Each half's price-only copies of the other half's priced scopes.
        let (mut local_priced_by, mut fallback_priced_by) = (Vec::new(), Vec::new());
        for id in inner.catalog.route_scopes(all)? {
            let path = inner.catalog.scope_path(id)?;
            let priced = inner.priced.contains(path);
            match inner.index.get(path) {
                Some(&i) => {
                    shared.push(i);
                    local_priced_by.extend(priced.then(|| path.to_owned()));
                }
                None => {
                    local.push(path.to_owned());
                    fallback_priced_by.extend(priced.then(|| path.to_owned()));
                }
            }
        }
        let mut fallback: Vec<String> = shared.iter().map(|&i| inner.scopes[i].path.to_string()).collect();
        if !local.is_empty() {
            local.extend(local_priced_by);
        }
        if !fallback.is_empty() {
            fallback.extend(fallback_priced_by);
        }
        Ok(SharedRoute {
            owner: inner.owner,
            catalog: all,
            local: (!local.is_empty()).then(|| inner.local.route(&local)).transpose()?,
            fallback: (!fallback.is_empty()).then(|| inner.fallback.route(&fallback)).transpose()?,
            shared: shared.into(),
        })
    }

    /// Reserves `estimate` (input tokens, cached input, and `max_tokens` as
    /// output) on every scope of `route`, or nothing. An estimate the core
    /// refuses (as [`RedisGovernor::settle`] lists) is an `InvalidRequest`.
    pub fn try_acquire(&self, route: &SharedRoute, estimate: Usage) -> Result<SharedPermit> {
        self.adopt_if_forked();
        self.inner.try_acquire(route, estimate)
    }

    /// Reconciles the permit with the provider's actual usage: refunds what
    /// was over-reserved, charges what was under, frees concurrency slots.
    /// A usage the core refuses (a count over [`llmgov::MAX_TOKENS`], more
    /// cached input than input) is an `InvalidRequest` naming the field that
    /// changes nothing: the permit stays pending, to be settled or cancelled.
    pub fn settle(&self, permit: &mut SharedPermit, actual: Usage) -> Result<()> {
        self.adopt_if_forked();
        self.inner.reconcile(permit, Some(actual))
    }

    /// Gives the whole reservation back (the request was never sent).
    pub fn cancel(&self, permit: &mut SharedPermit) -> Result<()> {
        self.adopt_if_forked();
        self.inner.reconcile(permit, None)
    }

    /// The link to Redis and the fallback counters.
    pub fn health(&self) -> Health {
        Health { redis_calls: self.inner.store.calls(), ..self.inner.health.read() }
    }

    /// The validated `[redis]` settings.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// The local engine of the non-shared scopes (snapshots, queues, feedback).
    pub fn local(&self) -> &Governor {
        &self.inner.local
    }

    /// Refreshes every concurrency slot this process holds now (the
    /// background heartbeat calls this every third of `slot_ttl`).
    pub fn heartbeat(&self) {
        self.adopt_if_forked();
        self.inner.heartbeat();
    }

    /// Gives every lease's unused part back to Redis now (also done on drop).
    pub fn return_leases(&self) {
        self.adopt_if_forked();
        self.inner.return_leases(u64::MAX);
    }
}

impl Drop for RedisGovernor {
    fn drop(&mut self) {
        // A forked child never returns (nor joins the keeper of) its parent.
        self.adopt_if_forked_with(false);
        self.inner.return_leases(u64::MAX);
    }
}

pub(crate) fn random_id() -> Arc<str> {
    format!("{:016x}", rand::random::<u64>()).into()
}

/// A serde error in the `[redis]` section, naming the field and the value
/// (serde quotes it in the reason), as the core does for its sections.
fn section_error(e: serde_path_to_error::Error<serde_json::Error>) -> Error {
    let reason = e.inner().to_string();
    let path = e.path().to_string();
    let at = if path == "." { "redis".to_owned() } else { format!("redis.{path}") };
    let quoted = |quote: char| reason.split(quote).nth(1).map(str::to_owned).unwrap_or_default();
    if let Some(missing) = reason.strip_prefix("missing field `") {
        return Error::config(format!("{at}.{}", missing.trim_end_matches('`')), "", reason.clone());
    }
    let value = if reason.starts_with("invalid type: string") { quoted('"') } else { quoted('`') };
    Error::config(at, value, reason)
}

/// The Redis client: plain, or TLS with the configured CA.
fn client(settings: &Settings) -> Result<redis::Client> {
    let url_error = |e: redis::RedisError| Error::config("redis.url", redact(&settings.url), e.to_string());
    #[cfg(feature = "tls")]
    if let Some(path) = &settings.tls_ca_file {
        let root_cert = std::fs::read(path).map_err(|e| Error::config("redis.tls_ca_file", path, e.to_string()))?;
        // A file with no certificate (DER, a key, the wrong file) would trust
        // nothing: every connection refused, the process on its safe share for good.
        use rustls::pki_types::{pem::PemObject, CertificateDer};
        let certificates = CertificateDer::pem_slice_iter(&root_cert).collect::<Result<Vec<_>, _>>();
        if !certificates.is_ok_and(|found| !found.is_empty()) {
            return Err(Error::config(
                "redis.tls_ca_file",
                path,
                "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            ));
        }
        let certificates = redis::TlsCertificates { client_tls: None, root_cert: Some(root_cert) };
        return redis::Client::build_with_tls(settings.url.as_str(), certificates).map_err(url_error);
    }
    redis::Client::open(settings.url.as_str()).map_err(url_error)
}

fn request(route: Route, estimate: Usage) -> Request {
    Request::new(route)
        .input_tokens(estimate.input_tokens)
        .cached_input_tokens(estimate.cached_input_tokens)
        .max_output_tokens(estimate.output_tokens)
}

impl Inner {
    fn try_acquire(&self, route: &SharedRoute, estimate: Usage) -> Result<SharedPermit> {
        self.check_owner("route", route.owner)?;
        // The local engine checks its part; the shared scopes' costs are summed here.
        estimate.validate()?;
        let charge = self.charge(route.catalog, estimate)?;
        self.check_fits(route, &charge)?;
        let local = match route.local {
            Some(r) => Some(self.local.try_acquire(&request(r, estimate)).map_err(Error::from_core)?),
            None => None,
        };
        let expires_at =
            local.as_ref().map_or_else(|| self.clock.now().saturating_add(self.permit_ttl_ns), Permit::expires_at);
        let mut permit = SharedPermit {
            owner: self.owner,
            local,
            fallback: None,
            outage: None,
            catalog: route.catalog,
            holds: Vec::new(),
            reconciled: false,
            expires_at,
        };
        let Some(fallback_route) = route.fallback else { return Ok(permit) };
        let now = self.clock.now();
        if self.health.redis_usable(now, self.settings.retry_interval) {
            match self.acquire_shared(&route.shared, &charge) {
                Ok(Ok(holds)) => {
                    self.health.on_success();
                    permit.holds = holds;
                    self.repay_outage(&route.shared, now);
                    return Ok(permit);
                }
                Ok(Err(denial)) => {
                    self.health.on_success();
                    self.release_local(&mut permit);
                    return Err(denial);
                }
                Err(e) => {
                    self.health.on_error(&e, now, self.settings.retry_interval);
                    self.store.drop_idle();
                }
            }
        }
        match self.fallback.try_acquire(&request(fallback_route, estimate)) {
            Ok(granted) => {
                self.health.on_fallback_admission();
                for &i in route.shared.iter() {
                    self.outage.charge(&self.scopes[i], i, &charge);
                }
                permit.fallback = Some(granted);
                permit.outage = Some((route.shared.clone(), charge));
                Ok(permit)
            }
            Err(e) => {
                self.release_local(&mut permit);
                Err(Error::from_core(e))
            }
        }
    }

    /// A route or permit of another governor names scopes by its indices:
    /// refused, as the core refuses another governor's.
    fn check_owner(&self, field: &'static str, owner: u64) -> Result<()> {
        if owner == self.owner {
            return Ok(());
        }
        let reason = format!("this {field} belongs to another RedisGovernor");
        Err(llmgov::Error::InvalidRequest { field, value: format!("{owner:016x}"), reason }.into())
    }

    /// `usage` with its price on `route` (of the whole config).
    fn charge(&self, route: Route, usage: Usage) -> Result<Charge> {
        Ok(Charge { usage, price: self.catalog.price_of(route, &usage)? })
    }

    fn check_fits(&self, route: &SharedRoute, charge: &Charge) -> Result<()> {
        for &i in route.shared.iter() {
            let scope = &self.scopes[i];
            for limit in &scope.limits {
                let cost = limit.cost(charge);
                if cost > limit.burst() {
                    let (scope, dimension, burst) = (scope.path.clone(), limit.dimension, limit.burst());
                    return Err(Error::NeverFits { scope, dimension, cost, burst });
                }
            }
        }
        Ok(())
    }

    fn release_local(&self, permit: &mut SharedPermit) {
        if let Some(local) = permit.local.as_mut() {
            // A permit just granted is live: cancelling it cannot fail.
            let _ = self.local.cancel(local);
        }
    }

    /// One script per shared scope, in route order; a refusal (or an error)
    /// gives back the scopes already reserved, so the request holds all or nothing.
    fn acquire_shared(&self, shared: &[usize], charge: &Charge) -> redis::RedisResult<Result<Vec<Hold>>> {
        let mut holds: Vec<Hold> = Vec::with_capacity(shared.len());
        for &i in shared {
            match self.acquire_scope(i, charge) {
                Ok(Ok(hold)) => holds.push(hold),
                other => {
                    for hold in &holds {
                        // Best effort: a failed give-back leaves capacity charged, never over-admits.
                        let _ = self.reconcile_hold(hold, None);
                    }
                    return other.map(|denial| denial.map(|_| Vec::new()));
                }
            }
        }
        Ok(Ok(holds))
    }

    fn acquire_scope(&self, i: usize, charge: &Charge) -> redis::RedisResult<Result<Hold>> {
        let scope = &self.scopes[i];
        let costs: Vec<u64> = scope.limits.iter().map(|l| l.cost(charge)).collect();
        if scope.mode == Mode::Leased {
            return self.acquire_leased(i, costs);
        }
        let slot = scope
            .has_slots()
            .then(|| format!("{}:{}", self.process_id(), self.next_slot.fetch_add(1, Ordering::Relaxed)));
        let seen = self.epochs[i].lock().clone();
        let fresh = format!("{:016x}", rand::random::<u64>());
        let ask = Ask {
            costs: &costs,
            seen_epoch: seen.as_deref(),
            fresh_epoch: &fresh,
            safe_share: self.settings.safe_share(),
            slot: slot.as_deref().unwrap_or(""),
            slot_ttl_us: self.settings.slot_ttl.as_micros() as u64,
        };
        let answer = self.store.acquire(scope, &ask)?;
        let (epoch, reset) = match &answer {
            Admission::Admitted { epoch, reset } | Admission::Refused { epoch, reset, .. } => (epoch.clone(), *reset),
        };
        self.saw_epoch(i, &epoch, reset);
        match answer {
            Admission::Admitted { .. } => {
                if let Some(slot) = &slot {
                    let expires = self.clock.now().saturating_add(self.permit_ttl_ns);
                    self.held[i].lock().insert(slot.clone(), expires);
                }
                Ok(Ok(Hold { scope: i, lease: None, epoch, slot, reserved: costs }))
            }
            Admission::Refused { limit, retry_us, .. } => Ok(Err(Error::RateLimited {
                scope: scope.path.clone(),
                dimension: scope.limits[limit].dimension,
                retry_after: retry_us.map(Duration::from_micros),
            })),
        }
    }

    /// Settles (`Some(actual)`) or cancels (`None`) every part of a permit.
    fn reconcile(&self, permit: &mut SharedPermit, actual: Option<Usage>) -> Result<()> {
        self.check_owner("permit", permit.owner)?;
        if permit.reconciled {
            return Err(Error::AlreadyReconciled);
        }
        // Before anything changes: a refused usage leaves the permit pending,
        // to be settled again or cancelled (its slots still held).
        if let Some(usage) = &actual {
            usage.validate()?;
        }
        let spent = actual.map(|usage| self.charge(permit.catalog, usage)).transpose()?;
        permit.reconciled = true;
        if self.clock.now() >= permit.expires_at {
            // As the core's permits: charged as estimated, and what it held
            // lapses on its own (slots are no longer heart-beaten).
            return Err(llmgov::Error::PermitExpired.into());
        }
        for (governor, part) in [(&self.local, &mut permit.local), (&self.fallback, &mut permit.fallback)] {
            if let Some(p) = part.as_mut() {
                match actual {
                    Some(usage) => governor.settle(p, usage)?,
                    None => governor.cancel(p)?,
                }
            }
        }
        if let Some((shared, estimate)) = &permit.outage {
            for &i in shared.iter() {
                self.outage.reconcile(&self.scopes[i], i, estimate, spent.as_ref());
            }
        }
        let now = self.clock.now();
        for hold in &permit.holds {
            if let Err(e) = self.reconcile_hold(hold, spent.as_ref()) {
                // Refunds are lost (capacity stays charged); a slot comes back after its TTL.
                self.health.on_error(&e, now, self.settings.retry_interval);
                self.store.drop_idle();
            }
        }
        Ok(())
    }

    /// Charges the shared scopes what the safe share admitted on them
    /// while Redis was away (nothing to do, and no call, when nothing is owed).
    fn repay_outage(&self, shared: &[usize], now: u64) {
        for &i in shared {
            let owed = self.outage.take(i);
            if owed.is_empty() {
                continue;
            }
            let reconcile = Reconcile { epoch: "", slot: None, deltas: &owed };
            if let Err(e) = self.store.settle(&self.scopes[i], &reconcile) {
                self.outage.restore(i, &owed);
                self.health.on_error(&e, now, self.settings.retry_interval);
                self.store.drop_idle();
            }
        }
    }

    pub(crate) fn saw_epoch(&self, i: usize, epoch: &str, reset: bool) {
        if reset {
            self.health.on_state_reset();
            // The safe-share restart already stands for the unknown past,
            // this process's outage admissions included: not charged twice.
            self.outage.take(i);
        }
        *self.epochs[i].lock() = Some(epoch.to_owned());
    }

    fn reconcile_hold(&self, hold: &Hold, actual: Option<&Charge>) -> redis::RedisResult<()> {
        let scope = &self.scopes[hold.scope];
        if let Some(slot) = &hold.slot {
            self.held[hold.scope].lock().remove(slot);
        }
        let deltas: Vec<(usize, i64)> = scope
            .limits
            .iter()
            .zip(&hold.reserved)
            .enumerate()
            .filter(|(_, (limit, _))| matches!(limit.kind, Kind::Rate { .. }))
            .map(|(i, (limit, &reserved))| {
                let spent = actual.map_or(0, |charge| limit.cost(charge));
                (i, spent as i64 - reserved as i64)
            })
            .filter(|&(_, delta)| delta != 0)
            .collect();
        if let Some(generation) = hold.lease {
            self.leases[hold.scope].reconcile(generation, &deltas, self.clock.now());
            return Ok(());
        }
        let reconcile = Reconcile { epoch: &hold.epoch, slot: hold.slot.as_deref(), deltas: &deltas };
        self.store.settle(scope, &reconcile)
    }

    /// Refreshes held slots (forgetting those whose permit expired
    /// unsettled) and returns leases about to lapse.
    pub(crate) fn heartbeat(&self) {
        let now = self.clock.now();
        self.return_leases(now.saturating_add(self.keeper_period().as_nanos() as u64));
        let ttl_us = self.settings.slot_ttl.as_micros() as u64;
        for (i, scope) in self.scopes.iter().enumerate() {
            let slots: Vec<String> = {
                let mut held = self.held[i].lock();
                held.retain(|_, &mut expires| expires > now);
                held.keys().cloned().collect()
            };
            if slots.is_empty() {
                continue;
            }
            if let Err(e) = self.store.heartbeat(scope, &slots, ttl_us) {
                self.health.on_error(&e, now, self.settings.retry_interval);
                self.store.drop_idle();
            }
        }
    }
}

impl Inner {
    pub(crate) fn process_id(&self) -> Arc<str> {
        self.process_id.lock().clone()
    }

    /// The keeper thread, if a scope holds slots or leases.
    pub(crate) fn start_keeper(self: &Arc<Self>) -> Option<Heartbeat> {
        let needed = self.scopes.iter().any(|s| s.has_slots() || s.mode == Mode::Leased);
        needed.then(|| Heartbeat::start(self.clone()))
    }

    /// How often the background keeper runs: a third of the shorter TTL.
    pub(crate) fn keeper_period(&self) -> Duration {
        self.settings.slot_ttl.min(self.settings.lease_ttl) / 3
    }
}
