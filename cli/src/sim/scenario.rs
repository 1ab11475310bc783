//! Scenario files: a provider, a workload and the strategies to compare, as
//! written in TOML (see `cli/scenarios/README.md`), and their validation into
//! the numbers the simulator runs on.
//!
//! Tagged variants are written as flat tables with a `kind` field rather than
//! serde's internally tagged enums: those lose the field's path in errors, and
//! a bad value must be reported with its full field name.

use serde::{Deserialize, Serialize};

use crate::error::{duration_ns, number, CliError};
use crate::provider::ProviderConfig;

/// A simulation scenario: what to run and against what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name, printed above the table.
    pub name: String,
    /// What the scenario shows.
    #[serde(default)]
    pub description: String,
    /// Seeds every random draw: the same seed gives the same report.
    #[serde(default)]
    pub seed: u64,
    /// The provider, as the mock server also models it.
    pub provider: ProviderConfig,
    /// One-way time between client and provider (default `10ms`): the
    /// provider sees a request that long after it is sent, and the client
    /// its answer that long after it is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_delay: Option<String>,
    /// Who sends what, and when.
    pub workload: WorkloadConfig,
    /// The client strategies to compare, in table order.
    pub strategies: Vec<StrategyConfig>,
}

/// The requests of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    /// Tenants and their weights; one tenant `default` if none.
    #[serde(default)]
    pub tenants: Vec<TenantConfig>,
    /// Traffic classes; each brings its own requests.
    pub classes: Vec<ClassConfig>,
}

/// A tenant: a weight for fairness and a share of the requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// Its name.
    pub name: String,
    /// Its fair share of capacity, relative to the others (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// The fraction of requests it sends, relative to the others (default:
    /// its weight).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
}

/// A traffic class: how many requests, when they arrive, how big they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassConfig {
    /// Its name, as reported.
    pub name: String,
    /// How many requests it sends.
    pub requests: u64,
    /// When they arrive.
    pub arrival: ArrivalConfig,
    /// Prompt tokens per request.
    pub input_tokens: SizeConfig,
    /// Tokens the model would answer with if `max_tokens` allowed.
    pub output_tokens: SizeConfig,
    /// The `max_tokens` every request of the class sets.
    pub max_tokens: u64,
    /// Prompt characters per token (default 4, as OpenAI's limiter assumes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chars_per_token: Option<f64>,
    /// The wait (arrival to admission) a request should not exceed; misses
    /// are counted, the request is still served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
}

/// How arrivals are spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalKind {
    /// Every request at `start`.
    AllAtOnce,
    /// A Poisson process of `per_minute` from `start`.
    Poisson,
    /// `size` requests at once, every `every`, from `start`.
    Bursts,
}

impl ArrivalKind {
    /// The name used in scenario files.
    pub fn as_str(self) -> &'static str {
        match self {
            ArrivalKind::AllAtOnce => "all_at_once",
            ArrivalKind::Poisson => "poisson",
            ArrivalKind::Bursts => "bursts",
        }
    }
}

/// An arrival process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrivalConfig {
    /// Which process.
    pub kind: ArrivalKind,
    /// When the first request may arrive (default `0s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// `poisson`: mean arrivals per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_minute: Option<f64>,
    /// `bursts`: requests per burst.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// `bursts`: time between bursts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
}

/// A size distribution: log-normal through `median` and `p95`, clamped to
/// `[min, max]`; without `p95`, always `median`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeConfig {
    /// The median.
    pub median: f64,
    /// The 95th percentile (at least the median).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p95: Option<f64>,
    /// Smallest value (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<u64>,
    /// Largest value (default 2^40, the most tokens the core takes in a request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
}

/// Which client strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StrategyKind {
    /// Send at once; on a refusal sleep `sleep` and send again.
    FixedSleep,
    /// Send at once; on a refusal sleep a uniform draw in
    /// `[0, min(cap, base × 2^n))` ("full jitter") and send again.
    Backoff,
    /// The seed article's `TokenAwareRateLimiter`: a 60 s deque of estimates
    /// (prompt + max_tokens), polled every `poll`, never reconciled.
    SeedLimiter,
    /// llmgov's ledger, charging as the provider counts and settling usage.
    Llmgov,
    /// The same ledger with llmgov's scheduler in front: a queue per class
    /// (its deadline as its maximum wait), tenants served by weight.
    LlmgovFair,
}

/// What llmgov reserves for a request's output on limits where the provider
/// charges actual usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputReserve {
    /// The request's `max_tokens`, as the provider's own limiter would hold it.
    #[default]
    MaxTokens,
    /// The p95 of the outputs seen so far (`llmgov::tokens::OutputModel`),
    /// capped at `max_tokens`, where the provider charges actual usage; limits
    /// of providers that charge `max_tokens` at admission keep `max_tokens`.
    Learned,
}

impl OutputReserve {
    /// The name used in scenario files.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputReserve::MaxTokens => "max_tokens",
            OutputReserve::Learned => "learned",
        }
    }
}

/// One strategy to run. Fields that do not apply to its `kind` are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StrategyConfig {
    /// Which strategy.
    pub kind: StrategyKind,
    /// `fixed_sleep`: the sleep after a refusal (default `1s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sleep: Option<String>,
    /// `backoff`: the first backoff ceiling (default `1s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// `backoff`: the largest backoff ceiling (default `60s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<String>,
    /// `fixed_sleep`, `backoff`: retries before giving up (default: never give up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// `seed_limiter`: time between `allow()` calls while refused (default `1s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll: Option<String>,
    /// `seed_limiter`: its RPM (default: the provider's, per minute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u64>,
    /// `seed_limiter`: its TPM (default: the provider's tokens limit, or its
    /// input plus output limits, per minute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u64>,
    /// `seed_limiter`, `llmgov`: whether the client is told the provider's
    /// limits (default true). Unknowing, it limits nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knows_limits: Option<bool>,
    /// `seed_limiter`, `llmgov`: the configured limits ÷ the provider's
    /// (default 1; 2 is "configured twice too high").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits_factor: Option<f64>,
    /// `llmgov`: what to reserve for the output (default `max_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<OutputReserve>,
    /// `llmgov`: how its provider scope adapts (AIMD, ramp, breaker), as
    /// the core's `[adaptive]` config (default: the core's defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<llmgov::config::AdaptiveConfig>,
}

/// A validated class: durations in nanoseconds.
#[derive(Debug, Clone)]
pub(crate) struct Class {
    pub config: ClassConfig,
    pub start_ns: u64,
    pub every_ns: Option<u64>,
    pub deadline_ns: Option<u64>,
    pub chars_per_token: f64,
}

/// A validated strategy, with its parameters in nanoseconds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Strategy {
    FixedSleep { sleep_ns: u64, max_retries: Option<u32> },
    Backoff { base_ns: u64, cap_ns: u64, max_retries: Option<u32> },
    SeedLimiter { poll_ns: u64, rpm: Option<u64>, tpm: Option<u64>, knows_limits: bool, factor: f64 },
    Llmgov { knows_limits: bool, factor: f64, reserve: OutputReserve, adaptive: Option<llmgov::config::AdaptiveConfig> },
    LlmgovFair,
}

/// A validated tenant.
#[derive(Debug, Clone)]
pub(crate) struct Tenant {
    pub name: String,
    pub weight: f64,
    pub share: f64,
}

/// A scenario checked and ready to run.
#[derive(Debug, Clone)]
pub(crate) struct Checked {
    pub network_ns: u64,
    pub tenants: Vec<Tenant>,
    pub classes: Vec<Class>,
    pub strategies: Vec<Strategy>,
}

fn positive(field: &str, value: f64) -> Result<f64, CliError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(CliError::field(field, number(value), "must be a positive number"))
    }
}

fn optional_duration(field: String, text: &Option<String>) -> Result<Option<u64>, CliError> {
    text.as_deref().map(|t| duration_ns(&field, t)).transpose()
}

/// How far a client's limits may be set from the provider's (`limits_factor`):
/// beyond these, its limits exceed what the core holds, or round to nothing.
const MIN_LIMITS_FACTOR: f64 = 0.001;
const MAX_LIMITS_FACTOR: f64 = 1000.0;

/// A tenant's weight and share are relative: a range of a million to one
/// is plenty, and beyond it the fairness index divides by nothing (a weight
/// of 1e-300 made it NaN).
const MIN_TENANT_RATIO: f64 = 0.001;
const MAX_TENANT_RATIO: f64 = 1000.0;

/// The most requests a scenario may hold, over all its classes: each costs
/// the simulator a few hundred bytes per strategy, and a million already
/// takes minutes.
pub(crate) const MAX_REQUESTS: u64 = 1_000_000;

/// A token count above the core's bound ([`llmgov::MAX_TOKENS`]) is refused
/// by name here rather than by the ledger mid-run.
fn at_most_max_tokens(field: &str, value: f64) -> Result<(), CliError> {
    if value > llmgov::MAX_TOKENS as f64 {
        return Err(CliError::field(field, number(value), format!("must be at most {} tokens", llmgov::MAX_TOKENS)));
    }
    Ok(())
}

/// [`at_most_max_tokens`] for a count written as an integer.
fn count_at_most_max_tokens(field: &str, value: u64) -> Result<(), CliError> {
    if value > llmgov::MAX_TOKENS {
        return Err(CliError::field(field, value, format!("must be at most {} tokens", llmgov::MAX_TOKENS)));
    }
    Ok(())
}

impl SizeConfig {
    fn check(&self, field: &str) -> Result<(), CliError> {
        positive(&format!("{field}.median"), self.median)?;
        at_most_max_tokens(&format!("{field}.median"), self.median)?;
        if let Some(p95) = self.p95 {
            at_most_max_tokens(&format!("{field}.p95"), p95)?;
        }
        for (name, value) in [("min", self.min), ("max", self.max)] {
            if let Some(value) = value {
                count_at_most_max_tokens(&format!("{field}.{name}"), value)?;
            }
        }
        if let Some(p95) = self.p95 {
            if !(p95.is_finite() && p95 >= self.median) {
                return Err(CliError::field(format!("{field}.p95"), p95, "must be at least the median"));
            }
        }
        if let (Some(min), Some(max)) = (self.min, self.max) {
            if max < min.max(1) {
                return Err(CliError::field(format!("{field}.max"), max, "must be at least `min` (and 1)"));
            }
        }
        if self.max == Some(0) {
            return Err(CliError::field(format!("{field}.max"), 0, "must be at least 1"));
        }
        Ok(())
    }
}

impl ArrivalConfig {
    /// Checks that exactly the fields of its kind are set; returns `(start, every)`.
    fn check(&self, field: &str) -> Result<(u64, Option<u64>), CliError> {
        let start = optional_duration(format!("{field}.start"), &self.start)?.unwrap_or(0);
        let (needs_rate, needs_bursts) = match self.kind {
            ArrivalKind::AllAtOnce => (false, false),
            ArrivalKind::Poisson => (true, false),
            ArrivalKind::Bursts => (false, true),
        };
        let kind = self.kind.as_str();
        for (name, value, wanted) in [
            ("per_minute", self.per_minute.map(|v| v.to_string()), needs_rate),
            ("size", self.size.map(|v| v.to_string()), needs_bursts),
            ("every", self.every.clone(), needs_bursts),
        ] {
            let at = format!("{field}.{name}");
            match (value, wanted) {
                (Some(value), false) => {
                    return Err(CliError::field(at, value, format!("does not apply to kind {kind}")))
                }
                (None, true) => return Err(CliError::field(at, "", format!("is required for kind {kind}"))),
                _ => {}
            }
        }
        if let Some(rate) = self.per_minute {
            positive(&format!("{field}.per_minute"), rate)?;
        }
        if self.size == Some(0) {
            return Err(CliError::field(format!("{field}.size"), 0, "must be at least 1"));
        }
        Ok((start, optional_duration(format!("{field}.every"), &self.every)?))
    }
}

impl ClassConfig {
    fn check(&self, field: &str) -> Result<Class, CliError> {
        if self.requests == 0 {
            return Err(CliError::field(format!("{field}.requests"), 0, "must be at least 1"));
        }
        if self.requests > MAX_REQUESTS {
            return Err(CliError::field(
                format!("{field}.requests"),
                self.requests,
                format!("must be at most {MAX_REQUESTS}"),
            ));
        }
        if self.max_tokens == 0 {
            return Err(CliError::field(format!("{field}.max_tokens"), 0, "must be at least 1"));
        }
        count_at_most_max_tokens(&format!("{field}.max_tokens"), self.max_tokens)?;
        self.input_tokens.check(&format!("{field}.input_tokens"))?;
        self.output_tokens.check(&format!("{field}.output_tokens"))?;
        let (start_ns, every_ns) = self.arrival.check(&format!("{field}.arrival"))?;
        let chars_per_token = match self.chars_per_token {
            Some(c) => positive(&format!("{field}.chars_per_token"), c)?,
            None => 4.0,
        };
        let deadline_ns = optional_duration(format!("{field}.deadline"), &self.deadline)?;
        Ok(Class { config: self.clone(), start_ns, every_ns, deadline_ns, chars_per_token })
    }
}

impl StrategyConfig {
    /// Refuses fields that do not apply to the kind: a setting that does
    /// nothing would mislead whoever reads the scenario.
    fn check_fields(&self, field: &str) -> Result<(), CliError> {
        use StrategyKind::*;
        let applies: [(&str, bool, &[StrategyKind]); 11] = [
            ("sleep", self.sleep.is_some(), &[FixedSleep]),
            ("base", self.base.is_some(), &[Backoff]),
            ("cap", self.cap.is_some(), &[Backoff]),
            ("max_retries", self.max_retries.is_some(), &[FixedSleep, Backoff]),
            ("poll", self.poll.is_some(), &[SeedLimiter]),
            ("rpm", self.rpm.is_some(), &[SeedLimiter]),
            ("tpm", self.tpm.is_some(), &[SeedLimiter]),
            ("knows_limits", self.knows_limits.is_some(), &[SeedLimiter, Llmgov]),
            ("limits_factor", self.limits_factor.is_some(), &[SeedLimiter, Llmgov]),
            ("reserve", self.reserve.is_some(), &[Llmgov]),
            ("adaptive", self.adaptive.is_some(), &[Llmgov]),
        ];
        for (name, set, kinds) in applies {
            if set && !kinds.contains(&self.kind) {
                let reason = format!("does not apply to kind {:?}", self.kind);
                return Err(CliError::field(format!("{field}.{name}"), self.value_of(name), reason));
            }
        }
        Ok(())
    }

    fn value_of(&self, name: &str) -> String {
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        let num = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        match name {
            "sleep" => text(&self.sleep),
            "base" => text(&self.base),
            "cap" => text(&self.cap),
            "poll" => text(&self.poll),
            "max_retries" => num(self.max_retries.map(u64::from)),
            "rpm" => num(self.rpm),
            "tpm" => num(self.tpm),
            "knows_limits" => self.knows_limits.map(|b| b.to_string()).unwrap_or_default(),
            "reserve" => self.reserve.map(|r| r.as_str().to_owned()).unwrap_or_default(),
            "adaptive" => format!("{:?}", self.adaptive),
            _ => self.limits_factor.map(|f| f.to_string()).unwrap_or_default(),
        }
    }

    fn check(&self, field: &str) -> Result<Strategy, CliError> {
        self.check_fields(field)?;
        let at = |name: &str| format!("{field}.{name}");
        let duration = |name: &str, text: &Option<String>, default: &str| {
            duration_ns(&at(name), text.as_deref().unwrap_or(default))
        };
        let factor = match self.limits_factor {
            Some(f) if (MIN_LIMITS_FACTOR..=MAX_LIMITS_FACTOR).contains(&f) => f,
            Some(f) => {
                let reason = format!("must be in [{MIN_LIMITS_FACTOR}, {MAX_LIMITS_FACTOR}]");
                return Err(CliError::field(at("limits_factor"), number(f), reason));
            }
            None => 1.0,
        };
        let knows_limits = self.knows_limits.unwrap_or(true);
        for (name, value) in [("rpm", self.rpm), ("tpm", self.tpm)] {
            if value == Some(0) {
                return Err(CliError::field(at(name), 0, "must be at least 1"));
            }
        }
        Ok(match self.kind {
            StrategyKind::FixedSleep => {
                Strategy::FixedSleep { sleep_ns: duration("sleep", &self.sleep, "1s")?, max_retries: self.max_retries }
            }
            StrategyKind::Backoff => {
                let base_ns = duration("base", &self.base, "1s")?;
                let cap_ns = duration("cap", &self.cap, "60s")?;
                if cap_ns < base_ns {
                    return Err(CliError::field(
                        at("cap"),
                        self.cap.as_deref().unwrap_or("60s"),
                        "must be at least `base`",
                    ));
                }
                Strategy::Backoff { base_ns, cap_ns, max_retries: self.max_retries }
            }
            StrategyKind::SeedLimiter => Strategy::SeedLimiter {
                poll_ns: duration("poll", &self.poll, "1s")?,
                rpm: self.rpm,
                tpm: self.tpm,
                knows_limits,
                factor,
            },
            StrategyKind::Llmgov => {
                let adaptive = self.adaptive.clone();
                Strategy::Llmgov { knows_limits, factor, reserve: self.reserve.unwrap_or_default(), adaptive }
            }
            StrategyKind::LlmgovFair => Strategy::LlmgovFair,
        })
    }
}

impl Scenario {
    /// Checks every field, naming the one at fault and its value.
    pub(crate) fn check(&self) -> Result<Checked, CliError> {
        // The provider model checks its own config when built; build one
        // here so that a bad provider is reported before anything runs.
        crate::provider::Provider::new(self.provider.clone(), self.seed, std::time::UNIX_EPOCH)?;
        if self.workload.classes.is_empty() {
            return Err(CliError::field("workload.classes", "[]", "give at least one class"));
        }
        if self.strategies.is_empty() {
            return Err(CliError::field("strategies", "[]", "give at least one strategy"));
        }
        let classes = (self.workload.classes.iter().enumerate())
            .map(|(i, c)| c.check(&format!("workload.classes[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, class) in self.workload.classes.iter().enumerate() {
            // Reports name classes, and llmgov's scheduler keys its queues
            // by name: two of one name would be merged, one's deadline
            // applied to the other's requests.
            if self.workload.classes[..i].iter().any(|other| other.name == class.name) {
                let field = format!("workload.classes[{i}].name");
                return Err(CliError::field(field, &class.name, "names another class already"));
            }
        }
        let requests: u64 = classes.iter().map(|c| c.config.requests).sum();
        if requests > MAX_REQUESTS {
            let reason = format!("the classes' requests add up to more than {MAX_REQUESTS}");
            return Err(CliError::field("workload.classes", requests, reason));
        }
        let strategies = (self.strategies.iter().enumerate())
            .map(|(i, s)| s.check(&format!("strategies[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let network_ns = duration_ns("network_delay", self.network_delay.as_deref().unwrap_or("10ms"))?;
        Ok(Checked { network_ns, tenants: self.tenants()?, classes, strategies })
    }

    fn tenants(&self) -> Result<Vec<Tenant>, CliError> {
        if self.workload.tenants.is_empty() {
            return Ok(vec![Tenant { name: "default".into(), weight: 1.0, share: 1.0 }]);
        }
        let mut tenants: Vec<Tenant> = Vec::new();
        for (i, t) in self.workload.tenants.iter().enumerate() {
            let field = |name: &str| format!("workload.tenants[{i}].{name}");
            if tenants.iter().any(|other| other.name == t.name) {
                return Err(CliError::field(field("name"), &t.name, "names another tenant already"));
            }
            // The name is a segment of the tenant's scope path, `tenants/NAME`:
            // a `/` would make it a scope below another, outside the shares.
            if t.name.is_empty() || t.name.contains('/') || t.name.contains(char::is_control) {
                let reason = "must be a non-empty name without `/` or control characters";
                return Err(CliError::field(field("name"), t.name.escape_debug(), reason));
            }
            let ratio = |name: &str, value: f64| {
                if (MIN_TENANT_RATIO..=MAX_TENANT_RATIO).contains(&value) {
                    Ok(value)
                } else {
                    let reason = format!("must be in [{MIN_TENANT_RATIO}, {MAX_TENANT_RATIO}]");
                    Err(CliError::field(field(name), number(value), reason))
                }
            };
            let weight = t.weight.map_or(Ok(1.0), |w| ratio("weight", w))?;
            let share = t.share.map_or(Ok(weight), |s| ratio("share", s))?;
            tenants.push(Tenant { name: t.name.clone(), weight, share });
        }
        Ok(tenants)
    }
}
