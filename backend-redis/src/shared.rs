//! A shared scope's limits as Redis enforces them, read from the core's
//! config, and the cost of a request on each.

use std::sync::Arc;

use llmgov::config::{Algorithm, LimitConfig, OutputReservation, ScopeConfig};
use llmgov::feedback::LimitShape;
use llmgov::{Config, Dimension, Usage, COST_UNITS_PER_CURRENCY};

use crate::errors::{Error, Result};
use crate::settings::{Mode, Settings};

const MICROS_PER_SECOND: f64 = 1e6;

/// A request's usage and its price: what every kind of shared limit counts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Charge {
    pub usage: Usage,
    /// In cost units (millionths of the config's currency); 0 on a route
    /// without a price.
    pub price: u64,
}

/// How one limit counts in Redis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Kind {
    /// GCRA: `interval_us` microseconds of theoretical arrival time per unit,
    /// holding up to `burst` units.
    Rate { interval_us: f64, burst: u64 },
    /// Slots in a sorted set, `capacity` at once.
    Concurrency { capacity: u64 },
}

/// One limit of a shared scope.
#[derive(Debug, Clone)]
pub(crate) struct SharedLimit {
    pub dimension: Dimension,
    pub kind: Kind,
    pub count_cached_input: bool,
    /// Its window (`None` for concurrency): what a provider's 429 is matched to.
    pub window_ns: Option<u64>,
    /// The state hash's field holding a rate limit's GCRA time, named by
    /// dimension and window (`tat:tokens:1m`), never by position: processes
    /// whose configs list the limits in another order, or add one, still
    /// charge the same bucket. Empty for concurrency.
    pub field: String,
}

impl SharedLimit {
    /// What `charge` costs on this limit (a request in flight costs one slot).
    pub fn cost(&self, charge: &Charge) -> u64 {
        let usage = &charge.usage;
        let input = if self.count_cached_input {
            usage.input_tokens
        } else {
            usage.input_tokens.saturating_sub(usage.cached_input_tokens)
        };
        match self.dimension {
            Dimension::Requests | Dimension::Concurrency => 1,
            Dimension::InputTokens => input,
            Dimension::OutputTokens => usage.output_tokens,
            Dimension::Tokens => input + usage.output_tokens,
            Dimension::Cost => charge.price,
        }
    }

    /// What a provider's answers are matched to.
    pub fn shape(&self) -> LimitShape {
        LimitShape { dimension: self.dimension, window_ns: self.window_ns }
    }

    /// The most this limit can ever hold at once.
    pub fn burst(&self) -> u64 {
        match self.kind {
            Kind::Rate { burst, .. } => burst,
            Kind::Concurrency { capacity } => capacity,
        }
    }
}

/// A scope whose limits live in Redis.
#[derive(Debug)]
pub(crate) struct SharedScope {
    pub path: Arc<str>,
    pub mode: Mode,
    pub limits: Vec<SharedLimit>,
    /// A provider's pool (`provider = true`): a 429 on a request through it
    /// holds its limits empty in Redis, for every process.
    pub provider: bool,
    /// `{llmgov:<prefix>:<path>}:state`, a hash of GCRA times and the epoch.
    pub state_key: String,
    /// `{llmgov:<prefix>:<path>}:slots`, the concurrency slots.
    pub slots_key: String,
    /// `{llmgov:<prefix>:<path>}:leases`, each process's lease (leased mode).
    pub leases_key: String,
    /// `{llmgov:<prefix>:<path>}:lease-expiries`, when each lease ends.
    pub expiries_key: String,
}

impl SharedScope {
    pub fn has_slots(&self) -> bool {
        self.limits.iter().any(|l| matches!(l.kind, Kind::Concurrency { .. }))
    }
}

/// Builds each shared scope from its entry in the core config.
pub(crate) fn compile(config: &Config, settings: &Settings) -> Result<Vec<SharedScope>> {
    let global_margin = config.safety_margin.unwrap_or(1.0);
    settings
        .scopes
        .iter()
        .map(|(path, &mode)| {
            let field = format!("redis.scopes.{path}");
            let scope = config
                .scopes
                .get(path)
                .ok_or_else(|| Error::config(&field, path, "not a scope of the config's [scopes]"))?;
            let margin = scope.safety_margin.unwrap_or(global_margin);
            let limits = compile_limits(path, scope, margin)?;
            if let (Mode::Leased, Some(i)) = (mode, limits.iter().position(|l| l.dimension == Dimension::Concurrency)) {
                return Err(Error::config(
                    format!("scopes.{path}.limits[{i}].dimension"),
                    "concurrency",
                    "a leased scope leases rate limits only; put the concurrency limit on an exact scope",
                ));
            }
            // One hash tag per scope: every key of a scope lands in one
            // Redis Cluster slot, so each script touches one slot.
            let tag = format!("{{llmgov:{}:{path}}}", settings.prefix);
            Ok(SharedScope {
                path: path.as_str().into(),
                mode,
                limits,
                provider: scope.provider.unwrap_or(false),
                state_key: format!("{tag}:state"),
                slots_key: format!("{tag}:slots"),
                leases_key: format!("{tag}:leases"),
                expiries_key: format!("{tag}:lease-expiries"),
            })
        })
        .collect()
}

fn compile_limits(path: &str, scope: &ScopeConfig, margin: f64) -> Result<Vec<SharedLimit>> {
    let mut limits: Vec<SharedLimit> = Vec::with_capacity(scope.limits.len());
    for (i, config) in scope.limits.iter().enumerate() {
        let field = format!("scopes.{path}.limits[{i}]");
        let limit = compile_limit(&field, config, margin)?;
        if !limit.field.is_empty() && limits.iter().any(|l| l.field == limit.field) {
            let reason = "a shared scope holds one limit per dimension and window (both would charge one Redis bucket)";
            return Err(Error::config(format!("{field}.window"), config.window.as_deref().unwrap_or_default(), reason));
        }
        limits.push(limit);
    }
    Ok(limits)
}

fn compile_limit(field: &str, limit: &LimitConfig, margin: f64) -> Result<SharedLimit> {
    let at = |name: &str| format!("{field}.{name}");
    let amount = match (limit.dimension, limit.budget) {
        // The core checked the budget: finite, at least one cost unit.
        (Dimension::Cost, Some(budget)) => (budget * COST_UNITS_PER_CURRENCY).floor() as u64,
        _ => limit
            .amount
            .ok_or_else(|| Error::config(at("amount"), "", "a shared scope's limits need an amount (no discovery)"))?,
    };
    match (limit.algorithm, limit.dimension) {
        (Some(Algorithm::SlidingWindow), _) => {
            return Err(Error::config(at("algorithm"), "sliding_window", "shared scopes enforce token buckets only"));
        }
        // A budget is a sliding window unless it says otherwise.
        (None, Dimension::Cost) => {
            let reason = "a shared budget is a token bucket: set algorithm = \"token_bucket\" (a budget's default, the sliding window, is not shared)";
            return Err(Error::config(at("algorithm"), "", reason));
        }
        _ => {}
    }
    if limit.reserve_output == Some(OutputReservation::Expected) {
        return Err(Error::config(at("reserve_output"), "expected", "shared scopes reserve max_tokens only"));
    }
    let scaled = |n: u64| ((n as f64 * margin).floor() as u64).max(1);
    let count_cached_input = limit.count_cached_input.unwrap_or(true);
    if limit.dimension == Dimension::Concurrency {
        let capacity = scaled(amount);
        return Ok(SharedLimit {
            dimension: limit.dimension,
            kind: Kind::Concurrency { capacity },
            count_cached_input,
            window_ns: None,
            field: String::new(),
        });
    }
    let window = limit.window.as_deref().unwrap_or_default();
    let window = humantime::parse_duration(window)
        .map_err(|e| Error::config(at("window"), window, format!("not a duration ({e})")))?;
    let field = format!("tat:{}:{}", limit.dimension, humantime::format_duration(window));
    let window_s = window.as_secs_f64();
    let amount = scaled(amount);
    let burst = limit.burst.map_or(amount, scaled);
    let interval_us = window_s * MICROS_PER_SECOND / amount as f64;
    Ok(SharedLimit {
        dimension: limit.dimension,
        kind: Kind::Rate { interval_us, burst },
        count_cached_input,
        window_ns: Some(window.as_nanos() as u64),
        field,
    })
}

/// The config a process enforces alone while Redis is away: only the shared
/// scopes, each amount and burst cut to the safe share (at least one), and
/// the local scopes that price requests, as price-only scopes.
pub(crate) fn fallback_config(config: &Config, settings: &Settings) -> Config {
    let share = settings.safe_share();
    let cut = |n: u64| ((n as f64 * share).floor() as u64).max(1);
    let mut fallback = config.clone();
    fallback.scopes.retain(|path, scope| settings.scopes.contains_key(path) || price_only(scope));
    for scope in fallback.scopes.values_mut() {
        for limit in &mut scope.limits {
            limit.amount = limit.amount.map(cut);
            limit.burst = limit.burst.map(cut);
            limit.budget = limit.budget.map(|b| (b * share).max(1.0 / COST_UNITS_PER_CURRENCY));
        }
    }
    fallback
}

/// The config of the scopes that stay local to each process, and the
/// shared scopes that price requests, as price-only scopes.
pub(crate) fn local_config(config: &Config, settings: &Settings) -> Config {
    let mut local = config.clone();
    local.scopes.retain(|path, scope| !settings.scopes.contains_key(path) || price_only(scope));
    local.shares.retain(|path, _| !settings.scopes.contains_key(path));
    local
}

/// Whether `scope` prices its requests; if so, it becomes a scope with its
/// price and no limit, for the half of the governor that does not enforce
/// it: a budget on one half is priced by a scope on the other.
fn price_only(scope: &mut ScopeConfig) -> bool {
    if scope.pricing.is_none() {
        return false;
    }
    scope.limits.clear();
    scope.provider = None;
    true
}
