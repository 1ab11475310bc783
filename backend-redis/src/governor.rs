//! [`RedisGovernor`]: the core's governor for local scopes, Redis for
//! shared ones, and the safe local share while Redis is away.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use llmgov::{Clock, Config, Governor, Ledger, MonotonicClock, Permit, Route, Usage};
use parking_lot::Mutex;

use crate::errors::{Error, Result};
use crate::health::{Health, HealthState};
use crate::heartbeat::Heartbeat;
use crate::lease::LocalLease;
use crate::outage::OutageDebt;
use crate::server::Server;
use crate::settings::{RedisConfig, Settings};
use crate::shared::{self, Charge, SharedScope};
use crate::store::Store;

mod feedback;
mod reservation;

pub use feedback::FeedbackTarget;

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
    /// The shared scopes among them that are a provider's pool.
    providers: Box<[usize]>,
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
    /// The shared provider scopes on its route: a 429 holds them in Redis.
    providers: Box<[usize]>,
    /// Its route's shared part in the fallback governor, which learns from
    /// the provider's answers too, to keep what it learnt through an outage.
    fallback_route: Option<Route>,
    reconciled: bool,
    /// When it was granted, on this process's clock: what the breaker of
    /// the safe share's copies dates its answer by.
    acquired_at: u64,
    /// When it expires unsettled, on this process's clock: a local part's
    /// own expiry, else the permit TTL from the acquire.
    expires_at: u64,
}

impl SharedPermit {
    /// Whether the shared part came from the safe local share (Redis was away).
    pub fn from_fallback(&self) -> bool {
        self.fallback.is_some()
    }

    /// Where provider feedback on this permit's request goes (see
    /// [`RedisGovernor::report`]): the route of its local part and when
    /// that part was granted, and its shared provider scopes.
    pub fn feedback_target(&self) -> FeedbackTarget {
        FeedbackTarget {
            owner: self.owner,
            local: self.local.as_ref().map(|local| (local.route(), local.acquired_at())),
            providers: self.providers.clone(),
            fallback: self.fallback_route,
            sent_at: self.acquired_at,
        }
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
    /// Whether Redis answered for it (a lease may serve without a call).
    pub(crate) from_redis: bool,
}

/// A concurrency slot this process holds in Redis.
#[derive(Debug)]
pub(crate) struct HeldSlot {
    /// When its permit expires unsettled, on this process's clock.
    pub(crate) expires: u64,
    /// The state epoch it was taken under (or last added again under).
    pub(crate) epoch: String,
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
    /// Concurrency slots held per shared scope, by slot id.
    pub(crate) held: Vec<Mutex<HashMap<String, HeldSlot>>>,
    /// This process's lease per shared scope (used by leased scopes).
    pub(crate) leases: Vec<LocalLease>,
    /// What the safe share admitted while Redis was away, owed to Redis.
    pub(crate) outage: OutageDebt,
    /// Per shared scope: until when (on `clock`) a breaker that opened on
    /// its safe share's copy holds it, not yet sent to Redis; 0 if none.
    pub(crate) breaker_holds: Vec<AtomicU64>,
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
        Self::from_value_with_clock(llmgov::config::toml_to_value(text)?, clock)
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
        let store = Store::new(Server::open(&settings)?, settings.timeout, clock.clone());
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
            breaker_holds: scopes.iter().map(|_| AtomicU64::new(0)).collect(),
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
        let providers = shared.iter().copied().filter(|&i| inner.scopes[i].provider).collect();
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
            providers,
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

    /// Charges `tokens` more streamed output as it arrives, as
    /// [`llmgov::Governor::add_output`] does, on the permit's local scopes
    /// (and on the safe share, for a permit it admitted while Redis was
    /// away). Its shared scopes reserved `max_tokens` at the acquire: output
    /// within it is paid for there, and any beyond it is charged in Redis
    /// at settle, from the usage. No Redis call. A settled or cancelled
    /// permit is `AlreadyReconciled`; one past its TTL, `PermitExpired`.
    pub fn add_output(&self, permit: &mut SharedPermit, tokens: u64) -> Result<()> {
        self.inner.add_output(permit, tokens)
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

impl Inner {
    pub(crate) fn process_id(&self) -> Arc<str> {
        self.process_id.lock().clone()
    }
}
