//! llmgov with its scheduler in front of the ledger (`kind =
//! "llmgov_fair"`): the same mirrored provider scope as the `llmgov`
//! strategy, each tenant on its own scope weighted as the scenario says,
//! each class with its own queue, priority and deadline (its `max_wait`),
//! served by `llmgov::scheduler::Scheduler` in virtual time. A request whose
//! predicted wait is past its class's deadline is given up at once; one
//! still waiting at its deadline is given up then.

use std::collections::{BTreeSet, HashMap};

use llmgov::config::classes::{ClassConfig, ShareConfig};
use llmgov::scheduler::{Outcome, Scheduler, WaiterId};
use llmgov::{Config, Ledger, Request, Route};

use super::llmgov::{ledger_config, reservation, InFlight, SCOPE, TIMER_SLACK_NS};
use crate::error::CliError;
use crate::provider::{ProviderConfig, ProviderUsage, Rejected};
use crate::sim::engine::{Client, Cx, Timer};
use crate::sim::scenario::{Class, OutputReserve, Tenant};

/// The tenants' scopes: one each, under this template.
const TENANTS: &str = "tenants";

/// Ledger and scheduler config: the provider mirror, a scope per tenant
/// with its weight, a queue per class with its deadline.
fn config(provider: &ProviderConfig, tenants: &[Tenant], classes: &[Class]) -> Result<Config, CliError> {
    let mut config = ledger_config(provider, true, 1.0, OutputReserve::MaxTokens, None)?;
    let template = format!("{TENANTS}/*");
    // The tenants' own scopes limit nothing: they name the tenant.
    let unlimited = r#"{ "limits": [{ "dimension": "requests", "amount": 9007199254740992, "window": "1s" }] }"#;
    config.scopes.insert(template, serde_json::from_str(unlimited).expect("a valid scope"));
    // Scheduler weights are integers: scale fractional ones by 100, and the
    // round-robin quantum down by as much, so a round stays as long.
    let scale = if tenants.iter().all(|t| t.weight.fract() == 0.0) { 1.0 } else { 100.0 };
    let quantum = (4096.0 / scale) as u64;
    for tenant in tenants {
        let weight = Some((tenant.weight * scale).round().max(1.0) as u32);
        config.shares.insert(format!("{TENANTS}/{}", tenant.name), ShareConfig { weight, ..ShareConfig::default() });
    }
    for class in classes {
        // Without a deadline a class waits as long as the run may last.
        let max_wait = class.deadline_ns.map_or("100d".to_owned(), |ns| format!("{ns}ns"));
        let settings = ClassConfig {
            queue_bound: Some(class.config.requests.max(1) as usize),
            max_wait: Some(max_wait),
            quantum: Some(quantum),
            ..ClassConfig::default()
        };
        config.classes.insert(class.config.name.clone(), settings);
    }
    Ok(config)
}

/// The ledger, the scheduler in front of it, and the requests in flight.
pub(crate) struct Fair {
    ledger: Ledger,
    scheduler: Scheduler,
    /// Each tenant's route: its scope and the provider's.
    routes: Vec<Route>,
    classes: Vec<String>,
    waiting: HashMap<WaiterId, usize>,
    in_flight: InFlight,
    /// Gate timers set and not yet fired.
    timers: BTreeSet<u64>,
}

impl Fair {
    pub fn new(
        provider: &ProviderConfig,
        tenants: &[Tenant],
        classes: &[Class],
        jobs: usize,
    ) -> Result<Self, CliError> {
        let config = config(provider, tenants, classes)?;
        let ledger = Ledger::new(&config)?;
        let routes = (tenants.iter())
            .map(|t| ledger.route(&[format!("{TENANTS}/{}", t.name), SCOPE.to_owned()]))
            .collect::<Result<_, _>>()?;
        Ok(Fair {
            scheduler: Scheduler::new(&config)?,
            ledger,
            routes,
            classes: classes.iter().map(|c| c.config.name.clone()).collect(),
            waiting: HashMap::new(),
            in_flight: InFlight::new(jobs, provider.charging()),
            timers: BTreeSet::new(),
        })
    }

    /// Queues a job (refused at once: given up) and polls.
    fn submit(&mut self, now: u64, job: usize, cx: &mut Cx) -> Result<(), CliError> {
        let j = &cx.jobs[job];
        let (input, output) = reservation(self.in_flight.charging(), j);
        let request = Request::new(self.routes[j.tenant]).input_tokens(input).max_output_tokens(output);
        match self.scheduler.submit(&self.ledger, request, &self.classes[j.class], None, now) {
            Ok(id) => {
                self.waiting.insert(id, job);
            }
            Err(_) => cx.fail(job),
        }
        self.pump(now, cx)
    }

    /// Admits whoever the scheduler lets through now; sets a timer for the next time.
    fn pump(&mut self, now: u64, cx: &mut Cx) -> Result<(), CliError> {
        let (ledger, mut outcomes) = (&self.ledger, Vec::new());
        self.scheduler.poll(now, &mut |r| ledger.try_acquire(r, now), &mut outcomes);
        for outcome in outcomes {
            let job = self.waiting.remove(&outcome.waiter()).expect("every waiter is a job");
            match outcome {
                Outcome::Admitted { permit, .. } => {
                    self.in_flight.hold(job, permit);
                    cx.send(job);
                }
                Outcome::Refused { .. } => cx.fail(job),
            }
        }
        if let Some(at) = self.scheduler.poll_timeout() {
            let at = at.max(now + 1).saturating_add(TIMER_SLACK_NS);
            if self.timers.range(..=at).next().is_none() {
                self.timers.insert(at);
                cx.at(at, Timer::Gate);
            }
        }
        Ok(())
    }
}

impl Client for Fair {
    fn arrive(&mut self, now: u64, job: usize, cx: &mut Cx) -> Result<(), CliError> {
        self.submit(now, job, cx)
    }

    fn wake(&mut self, now: u64, timer: Timer, cx: &mut Cx) -> Result<(), CliError> {
        match timer {
            Timer::Retry(job) => self.submit(now, job, cx),
            Timer::Gate => {
                self.timers.remove(&now);
                self.pump(now, cx)
            }
        }
    }

    /// As the `llmgov` strategy: report, keep the local charge, retry.
    fn rejected(&mut self, now: u64, job: usize, rejected: &Rejected, cx: &mut Cx) -> Result<(), CliError> {
        self.in_flight.refused(&self.ledger, now, job, rejected, cx)?;
        self.pump(now, cx)
    }

    fn finished(
        &mut self,
        now: u64,
        job: usize,
        usage: ProviderUsage,
        headers: &[(String, String)],
        cx: &mut Cx,
    ) -> Result<(), CliError> {
        self.in_flight.succeeded(&self.ledger, now, job, &usage, headers)?;
        self.pump(now, cx)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::sim::simulate_file;

    fn run(name: &str) -> (crate::sim::StrategyReport, crate::sim::StrategyReport) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(format!("{name}.toml"));
        let mut report = simulate_file(&path).unwrap();
        let fair = report.strategies.pop().unwrap();
        let line = report.strategies.pop().unwrap();
        assert_eq!((line.name.as_str(), fair.name.as_str()), ("llmgov", "llmgov fair queues"));
        (line, fair)
    }

    #[test]
    fn weights_of_three_to_one_are_served_three_to_one() {
        let (line, fair) = run("fair_tenants_3_to_1");
        let (fair_jain, line_jain) = (fair.jain_fairness.unwrap(), line.jain_fairness.unwrap());
        assert!(fair_jain > 0.98 && line_jain < 0.8, "{fair_jain} vs {line_jain}");
        assert_eq!(fair.provider_429s, 0);
        assert!(fair.makespan_s <= line.makespan_s * 1.01, "fairness costs no throughput");
    }

    #[test]
    fn interactive_requests_meet_their_deadline_beside_a_batch_backlog() {
        let (line, fair) = run("fair_interactive_plus_batch");
        let misses = |r: &crate::sim::StrategyReport| {
            r.classes.iter().find(|c| c.name == "interactive").unwrap().deadline_misses
        };
        assert_eq!((misses(&line), misses(&fair)), (40, 0));
        assert_eq!(fair.provider_429s, 0);
        assert!(fair.makespan_s <= line.makespan_s * 1.01);
    }
}
