//! Validation of a [`Config`] into the limits the ledger enforces.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::{Algorithm, Config, LimitConfig, OutputReservation};
use crate::dimension::CostKind;
use crate::ledger::feedback::{DAY_NS, MINUTE_NS};
use crate::ledger::gcra::{GcraParams, MAX_DEBT_NS};
use crate::ledger::limit::{Limit, Rule, SlotWidth};
use crate::ledger::registry::{ScopeSpec, Template};
use crate::ledger::ring::MAX_WINDOW_AMOUNT;
use crate::pricing::{budget_units, Price};
use crate::time::duration_ns;
use crate::{Dimension, Error, Result};

/// Default permit TTL: ten minutes.
pub const DEFAULT_PERMIT_TTL: Duration = Duration::from_secs(600);
const DEFAULT_SLOTS: u32 = 60;
/// Amounts past this are surely typos, and keep every sum far from overflow.
const MAX_AMOUNT: u64 = 1 << 53;
/// Narrower sliding-window slots cost memory without meaning anything to a provider.
const MIN_SLOT_NS: u64 = 1_000_000;
/// Every acquire scans a window's slots: more would cost time, not precision.
const MAX_SLOTS: u32 = 4096;
/// Longer than any provider's or budget's period (a year, with room).
const MAX_WINDOW_NS: u64 = 400 * 86_400 * 1_000_000_000;

/// A validated config, ready to build a ledger from.
#[derive(Debug)]
pub(crate) struct Compiled {
    /// Configured scopes by path.
    pub configured: Vec<(String, ScopeSpec)>,
    pub templates: Vec<Template>,
    pub permit_ttl_ns: u64,
    pub adaptive: super::adaptive::Adaptive,
}

pub(crate) fn compile(config: &Config) -> Result<Compiled> {
    let global_margin = margin(config.safety_margin, "safety_margin")?.unwrap_or(1.0);
    let permit_ttl_ns = match &config.permit_ttl {
        None => duration_ns(DEFAULT_PERMIT_TTL),
        Some(text) => {
            let ns = parse_duration("permit_ttl", text)?;
            if ns < MIN_SLOT_NS {
                return Err(Error::config("permit_ttl", text, "must be at least 1ms"));
            }
            ns
        }
    };
    if let Some(output) = &config.output {
        output.validate()?;
    }
    let adaptive = config.adaptive.clone().unwrap_or_default().compile()?;
    super::profiles::validate(&config.profiles, &config.scopes)?;
    let prices: BTreeMap<&str, Arc<Price>> = config
        .pricing
        .iter()
        .map(|(name, price)| Ok((name.as_str(), Arc::new(price.compile(name)?))))
        .collect::<Result<_>>()?;
    let mut compiled = Compiled { configured: Vec::new(), templates: Vec::new(), permit_ttl_ns, adaptive };
    for (path, scope) in &config.scopes {
        let field = format!("scopes.{path}");
        let segments = template_segments(&field, path)?;
        let own_margin = margin(scope.safety_margin, &format!("{field}.safety_margin"))?;
        let scope_margin = own_margin.unwrap_or(global_margin);
        // The global margin is slack against a provider's own counting; a
        // budget is the user's money, spent in full unless its scope says.
        let budget_margin = own_margin.unwrap_or(1.0);
        // A scope with no limit only prices its routes (as the Redis
        // backend's local half prices by a scope shared through Redis).
        if scope.limits.is_empty() && scope.pricing.is_none() {
            let reason = "a scope needs at least one limit, or a `pricing` to price its routes";
            return Err(Error::config(format!("{field}.limits"), "[]", reason));
        }
        let provider = scope.provider.unwrap_or(false);
        let limits: Arc<[Limit]> = scope
            .limits
            .iter()
            .enumerate()
            .map(|(i, limit)| {
                let margin = if limit.dimension == Dimension::Cost { budget_margin } else { scope_margin };
                compile_limit(&format!("{field}.limits[{i}]"), limit, margin, provider)
            })
            .collect::<Result<_>>()?;
        let price = match &scope.pricing {
            None => None,
            Some(name) => Some(prices.get(name.as_str()).cloned().ok_or_else(|| {
                let known = prices.keys().copied().collect::<Vec<_>>().join(", ");
                Error::config(format!("{field}.pricing"), name, format!("names no pricing table; known: [{known}]"))
            })?),
        };
        let spec = ScopeSpec { limits, provider, price };
        if segments.iter().any(Option::is_none) {
            compiled.templates.push(Template { segments, spec });
        } else {
            compiled.configured.push((path.clone(), spec));
        }
    }
    Ok(compiled)
}

fn margin(value: Option<f64>, field: &str) -> Result<Option<f64>> {
    match value {
        Some(m) if !(m > 0.0 && m <= 1.0) => Err(Error::config(field, m, "must be in (0, 1]")),
        other => Ok(other),
    }
}

pub(super) fn parse_duration(field: &str, text: &str) -> Result<u64> {
    let d = humantime::parse_duration(text)
        .map_err(|e| Error::config(field, text, format!("not a duration ({e}); write e.g. 1s, 1m, 1d, 500ms")))?;
    match duration_ns(d) {
        0 => Err(Error::config(field, text, "must be longer than zero")),
        ns => Ok(ns),
    }
}

/// Splits a configured path; `*` segments (templates) become `None`.
fn template_segments(field: &str, path: &str) -> Result<Vec<Option<Box<str>>>> {
    let segments: Vec<&str> = path.split('/').collect();
    if path.is_empty() || segments.iter().any(|s| s.is_empty()) {
        return Err(Error::config(field, path, "a scope path needs non-empty segments separated by `/`"));
    }
    // Requests are refused such paths, so the scope could never be used.
    if let Some(c) = path.chars().find(|c| c.is_control()) {
        return Err(Error::config(
            field,
            path,
            format!("holds the control character {c:?}; scope paths are printable text"),
        ));
    }
    if let Some(bad) = segments.iter().find(|s| s.contains('*') && **s != "*") {
        return Err(Error::config(field, path, format!("`*` must be a whole segment, not part of `{bad}`")));
    }
    Ok(segments.into_iter().map(|s| (s != "*").then(|| s.into())).collect())
}

fn compile_limit(field: &str, limit: &LimitConfig, margin: f64, provider: bool) -> Result<Limit> {
    let at = |name: &str| format!("{field}.{name}");
    let Some(configured) = limit_amount(&at, limit)? else { return discovered_limit(&at, limit, margin, provider) };
    if configured == 0 {
        return Err(Error::config(at("amount"), 0, "must be at least 1"));
    }
    if configured > MAX_AMOUNT {
        return Err(Error::config(at("amount"), configured, format!("must be at most {MAX_AMOUNT}")));
    }
    let amount = scaled(configured, margin, &at("amount"))?;
    let count_cached_input = count_cached_input(&at, limit)?;
    let base = Limit {
        dimension: limit.dimension,
        rule: Rule::Concurrency { max: amount },
        cost_kind: CostKind::of(limit.dimension, count_cached_input, reserve_expected(&at, limit)?),
        configured_amount: configured,
        amount,
        burst: amount,
        window_ns: None,
        discovered: false,
        margin,
    };
    if limit.dimension == Dimension::Concurrency {
        no_window_fields(&at, limit)?;
        return Ok(base);
    }
    let window_text = limit.window.as_deref().ok_or_else(|| {
        Error::config(at("window"), "", format!("a {} limit needs a window, e.g. \"1m\"", limit.dimension))
    })?;
    let window_ns = parse_duration(&at("window"), window_text)?;
    if window_ns > MAX_WINDOW_NS {
        return Err(Error::config(at("window"), window_text, "must be at most 400 days"));
    }
    let rule = match limit.algorithm.unwrap_or(default_algorithm(limit.dimension)) {
        Algorithm::TokenBucket => token_bucket(&at, limit, amount, window_ns, margin)?,
        Algorithm::SlidingWindow => sliding_window(&at, limit, amount, window_ns, window_text)?,
    };
    let burst = match &rule {
        Rule::TokenBucket(params) => params.burst(),
        _ => amount,
    };
    Ok(Limit { rule, burst, window_ns: Some(window_ns), ..base })
}

/// Whether a limit counts cached input: by default yes; only input and
/// total token limits may say no.
fn count_cached_input(at: &dyn Fn(&str) -> String, limit: &LimitConfig) -> Result<bool> {
    match (limit.count_cached_input, limit.dimension) {
        (Some(v), Dimension::InputTokens | Dimension::Tokens) | (Some(v @ true), _) => Ok(v),
        (None, _) => Ok(true),
        (Some(v), d) => Err(Error::config(
            at("count_cached_input"),
            v,
            format!("only input_tokens and tokens count cached input, not {d}"),
        )),
    }
}

/// A concurrency limit counts requests in flight: a window, an algorithm,
/// a burst or slots given to one is a mistake, not something to ignore.
fn no_window_fields(at: &dyn Fn(&str) -> String, limit: &LimitConfig) -> Result<()> {
    let stray = [
        ("window", limit.window.clone()),
        ("algorithm", limit.algorithm.map(|a| a.as_str().to_owned())),
        ("burst", limit.burst.map(|b| b.to_string())),
        ("slots", limit.slots.map(|s| s.to_string())),
    ];
    match stray.into_iter().find(|(_, v)| v.is_some()) {
        Some((name, Some(value))) => Err(Error::config(
            at(name),
            value,
            "concurrency counts requests in flight and takes no window, algorithm, burst or slots",
        )),
        _ => Ok(()),
    }
}

/// The amount a limit states: `amount`, or for a `cost` limit its `budget`
/// in cost units. `None` when it is left to the provider to say.
fn limit_amount(at: &dyn Fn(&str) -> String, limit: &LimitConfig) -> Result<Option<u64>> {
    match (limit.dimension, limit.amount, limit.budget) {
        (Dimension::Cost, None, Some(budget)) => Ok(Some(budget_units(&at("budget"), budget)?)),
        (Dimension::Cost, Some(amount), _) => {
            Err(Error::config(at("amount"), amount, "a cost limit takes `budget`, in currency units (e.g. 12.5)"))
        }
        (Dimension::Cost, None, None) => {
            Err(Error::config(at("budget"), "", "a cost limit needs a budget, in currency units (e.g. 12.5)"))
        }
        (d, _, Some(budget)) => Err(Error::config(
            at("budget"),
            budget,
            format!("only cost limits have a budget; a {d} limit takes `amount`"),
        )),
        (_, amount, None) => Ok(amount),
    }
}

/// Budgets are sliding windows unless they say otherwise: a token bucket
/// would let an idle day's budget be spent twice over the next.
fn default_algorithm(dimension: Dimension) -> Algorithm {
    match dimension {
        Dimension::Cost => Algorithm::SlidingWindow,
        _ => Algorithm::TokenBucket,
    }
}

fn token_bucket(
    at: &dyn Fn(&str) -> String,
    limit: &LimitConfig,
    amount: u64,
    window_ns: u64,
    margin: f64,
) -> Result<Rule> {
    if let Some(slots) = limit.slots {
        return Err(Error::config(at("slots"), slots, "only a sliding_window has slots"));
    }
    let burst = match limit.burst {
        Some(b) if limit.dimension == Dimension::Cost => {
            return Err(Error::config(at("burst"), b, "a cost budget's burst is the budget itself"))
        }
        None => amount,
        Some(0) => return Err(Error::config(at("burst"), 0, "must be at least 1")),
        Some(b) if b > MAX_AMOUNT => {
            return Err(Error::config(at("burst"), b, format!("must be at most {MAX_AMOUNT}")))
        }
        Some(b) => scaled(b, margin, &at("burst"))?,
    };
    let params = GcraParams::new(amount, window_ns, burst);
    // The burst, as refill time, must leave the timeline room for debt.
    if params.tau_ns() > MAX_DEBT_NS / 2 {
        let field = if limit.burst.is_some() { "burst" } else { "amount" };
        return Err(Error::config(at(field), burst, "takes over 73 years to refill: lower the burst or the window"));
    }
    Ok(Rule::TokenBucket(params))
}

fn sliding_window(
    at: &dyn Fn(&str) -> String,
    limit: &LimitConfig,
    amount: u64,
    window_ns: u64,
    window_text: &str,
) -> Result<Rule> {
    if let Some(burst) = limit.burst {
        let reason = "a sliding_window never exceeds its amount; burst is for token_bucket";
        return Err(Error::config(at("burst"), burst, reason));
    }
    if amount > MAX_WINDOW_AMOUNT && limit.dimension == Dimension::Cost {
        let most = MAX_WINDOW_AMOUNT as f64 / crate::pricing::COST_UNITS_PER_CURRENCY;
        let reason = format!("a sliding-window budget holds at most {most}; use algorithm = \"token_bucket\"");
        return Err(Error::config(at("budget"), limit.budget.unwrap_or_default(), reason));
    }
    if amount > MAX_WINDOW_AMOUNT {
        let reason = format!("a sliding_window holds at most {MAX_WINDOW_AMOUNT}; use token_bucket");
        return Err(Error::config(at("amount"), amount, reason));
    }
    if window_ns < MIN_SLOT_NS {
        return Err(Error::config(at("window"), window_text, "a sliding_window needs at least 1ms"));
    }
    let slots = limit.slots.unwrap_or(DEFAULT_SLOTS.min((window_ns / MIN_SLOT_NS) as u32));
    if slots == 0 || slots > MAX_SLOTS || window_ns / u64::from(slots) < MIN_SLOT_NS {
        let reason = format!("need 1 to {MAX_SLOTS} slots, each at least 1ms of the {window_text} window");
        return Err(Error::config(at("slots"), slots, reason));
    }
    // Rounding the slot up only lengthens the window: the safe side.
    Ok(Rule::SlidingWindow { amount, slot: SlotWidth::new(window_ns.div_ceil(u64::from(slots))), slots })
}

/// A limit whose amount the provider's `limit` headers will say. Until then
/// its bucket holds one unit per window and every charge is capped at the
/// whole bucket: one request per window, whatever its size.
fn discovered_limit(at: &dyn Fn(&str) -> String, limit: &LimitConfig, margin: f64, provider: bool) -> Result<Limit> {
    let unset = |reason: &str| Err(Error::config(at("amount"), "", reason.to_owned()));
    if !provider {
        return unset("is required: only a provider scope (provider = true) learns its limits from the provider");
    }
    if limit.dimension == Dimension::Concurrency || limit.algorithm == Some(Algorithm::SlidingWindow) {
        return unset("is required: only token_bucket limits are discovered from the provider's headers");
    }
    if let Some(burst) = limit.burst {
        return Err(Error::config(at("burst"), burst, "a discovered limit's burst is its discovered amount"));
    }
    if let Some(slots) = limit.slots {
        return Err(Error::config(at("slots"), slots, "only a sliding_window has slots"));
    }
    let window_text = limit.window.as_deref().ok_or_else(|| {
        Error::config(at("window"), "", "a discovered limit needs the window its provider counts in, e.g. \"1m\"")
    })?;
    let window_ns = parse_duration(&at("window"), window_text)?;
    if window_ns != MINUTE_NS && window_ns != DAY_NS {
        return Err(Error::config(
            at("window"),
            window_text,
            "a discovered limit learns its amount from `limit` headers, which state it per minute or per day: \"1m\" or \"1d\"",
        ));
    }
    Ok(Limit {
        dimension: limit.dimension,
        rule: Rule::TokenBucket(GcraParams::new(1, window_ns, 1)),
        cost_kind: CostKind::of(limit.dimension, count_cached_input(at, limit)?, reserve_expected(at, limit)?),
        configured_amount: 0,
        amount: 0,
        // Unknown: any request may fit. The provider says if it never does.
        burst: MAX_AMOUNT,
        window_ns: Some(window_ns),
        discovered: true,
        margin,
    })
}

/// Whether the limit reserves the expected output rather than `max_tokens`.
fn reserve_expected(at: &dyn Fn(&str) -> String, limit: &LimitConfig) -> Result<bool> {
    match (limit.reserve_output, limit.dimension) {
        (None | Some(OutputReservation::MaxTokens), _) => Ok(false),
        (Some(OutputReservation::Expected), Dimension::OutputTokens | Dimension::Tokens | Dimension::Cost) => Ok(true),
        (Some(OutputReservation::Expected), d) => Err(Error::config(
            at("reserve_output"),
            "expected",
            format!("only output_tokens, tokens and cost count output, not {d}"),
        )),
    }
}

fn scaled(amount: u64, margin: f64, field: &str) -> Result<u64> {
    let scaled = (amount as f64 * margin).floor() as u64;
    if scaled == 0 {
        return Err(Error::config(field, amount, format!("is zero after the safety margin of {margin}")));
    }
    Ok(scaled)
}
