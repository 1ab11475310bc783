//! The discrete-event simulator: a workload of requests, a provider model
//! enforcing limits the way providers do, and client strategies compared on
//! the same workload, in virtual time. Deterministic for a seed: the same
//! scenario gives the same report, and a 20-minute run takes well under a
//! second.
//!
//! Scenario files are TOML; their format is in `cli/scenarios/README.md`.

mod bound;
mod engine;
mod plot;
mod report;
mod scenario;
mod strategies;
mod workload;

use std::path::Path;

pub use bound::{Bound, BoundTerm, TokenLimit};
pub use plot::write_svg;
pub use report::{ClassReport, Report, StrategyReport, TenantReport};
pub use scenario::{
    ArrivalConfig, ArrivalKind, ClassConfig, Scenario, SizeConfig, StrategyConfig, StrategyKind, TenantConfig,
    WorkloadConfig,
};

use crate::error::{parse_toml, CliError};

/// The seed article's batch case, shipped as `cli/scenarios/seed_batch.toml`.
const SEED_BATCH: &str = include_str!("../../scenarios/seed_batch.toml");

/// Keeps the provider's random draws apart from the workload's, which use
/// the scenario seed itself.
const PROVIDER_SEED_OFFSET: u64 = 0x9E37_79B9_7F4A_7C15;

/// The seed article's batch case: 1000 requests of about 2000 tokens
/// against 60 RPM and 100k TPM, with every strategy.
pub fn demo_scenario() -> Scenario {
    parse_toml(SEED_BATCH).expect("the shipped seed_batch.toml is valid")
}

/// Runs every strategy of the scenario on the same workload and reports
/// them beside the lower bound.
pub fn run(scenario: &Scenario) -> Result<Report, CliError> {
    let checked = scenario.check()?;
    let jobs = workload::generate(scenario.seed, &checked.classes, &checked.tenants);
    refuse_arrivals_past_the_horizon(&checked.classes, &jobs)?;
    refuse_requests_that_never_fit(scenario, &jobs)?;
    let (bound, token_limit) = bound::lower_bound(&scenario.provider, checked.network_ns, &jobs)?;
    let provider_seed = scenario.seed.wrapping_add(PROVIDER_SEED_OFFSET);
    let mut reports = Vec::new();
    for (i, strategy) in checked.strategies.iter().enumerate() {
        let name = strategies::label(strategy);
        let mut client = strategies::build(strategy, &checked, &scenario.provider, scenario.seed, i, jobs.len())?;
        let run = engine::run(&scenario.provider, provider_seed, checked.network_ns, &jobs, client.as_mut(), &name)?;
        let charging = scenario.provider.charging();
        reports.push(report::strategy(name, &run, &jobs, &checked, &bound, token_limit.as_ref(), charging));
    }
    Ok(Report {
        scenario: scenario.name.clone(),
        description: scenario.description.clone(),
        seed: scenario.seed,
        requests: jobs.len(),
        bound,
        token_limit,
        strategies: reports,
    })
}

/// A run stops after a week of virtual time; a class whose requests arrive
/// later (a late `start`, a slow Poisson rate, sparse bursts) is refused by
/// name rather than reported as a strategy that never finished.
fn refuse_arrivals_past_the_horizon(classes: &[scenario::Class], jobs: &[workload::Job]) -> Result<(), CliError> {
    let Some(late) = jobs.last().filter(|j| j.arrival > engine::MAX_VIRTUAL_NS) else { return Ok(()) };
    let arrival = &classes[late.class].config.arrival;
    let at = humantime::format_duration(std::time::Duration::from_secs(late.arrival / 1_000_000_000));
    let value = format!("{} from {}", arrival.kind.as_str(), arrival.start.as_deref().unwrap_or("0s"));
    let reason = format!(
        "its last request would arrive after {at}, past the week of virtual time a run may last; \
         start sooner, arrive faster or send fewer requests"
    );
    Err(CliError::field(format!("workload.classes[{}].arrival", late.class), value, reason))
}

/// A request the provider could never admit (it costs more on a limit than
/// the limit holds) would leave every strategy retrying, or giving up, for
/// nothing, and the lower bound meaningless: the scenario is refused,
/// naming the class and the first such request.
fn refuse_requests_that_never_fit(scenario: &Scenario, jobs: &[workload::Job]) -> Result<(), CliError> {
    let provider = crate::provider::Provider::new(scenario.provider.clone(), 0, std::time::UNIX_EPOCH)?;
    for job in jobs {
        refuse_a_prompt_too_large_to_estimate(scenario, job)?;
        if let Some(too_large) = provider.too_large(&job.request()) {
            let window = humantime::format_duration(std::time::Duration::from_nanos(too_large.window_ns));
            let value = format!("a request of {} input tokens with max_tokens {}", job.input_tokens, job.max_tokens);
            let reason = format!(
                "it is charged {} on the provider's {} limit, which holds {} per {window}, so no client could \
                 ever send it; lower the class's input_tokens (or set input_tokens.max) or max_tokens",
                too_large.requested,
                too_large.dimension.as_str(),
                too_large.limit,
            );
            return Err(CliError::field(format!("workload.classes[{}]", job.class), value, reason));
        }
    }
    Ok(())
}

/// A prompt whose characters ÷ 4 pass `llmgov::MAX_TOKENS` would be refused
/// by the core as its `input_tokens`, a field the scenario does not have:
/// the characters come from the class's `chars_per_token`, so that is named.
fn refuse_a_prompt_too_large_to_estimate(scenario: &Scenario, job: &workload::Job) -> Result<(), CliError> {
    if job.prompt_estimate() <= llmgov::MAX_TOKENS {
        return Ok(());
    }
    let class = &scenario.workload.classes[job.class];
    let reason = format!(
        "a request of {} input tokens is then {} characters, estimated at {} tokens (characters / 4), more \
         than the {} a request may have; lower chars_per_token or the class's input_tokens",
        job.input_tokens,
        job.prompt_chars,
        job.prompt_estimate(),
        llmgov::MAX_TOKENS
    );
    let value = crate::error::number(class.chars_per_token.unwrap_or(4.0));
    Err(CliError::field(format!("workload.classes[{}].chars_per_token", job.class), value, reason))
}

/// Loads a scenario file and runs it. Every error names the file.
pub fn simulate_file(path: &Path) -> Result<Report, CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| CliError::from(e).in_file(path))?;
    let scenario: Scenario = parse_toml(&text).map_err(|e| e.in_file(path))?;
    run(&scenario).map_err(|e| e.in_file(path))
}
