//! What a run reports per strategy, worked out from the raw outcomes, and
//! the side-by-side table it prints.

use std::fmt;

use serde::Serialize;

use super::bound::{charge, Bound, TokenLimit};
use super::engine::Run;
use super::scenario::Checked;
use super::workload::Job;
use crate::provider::Charging;

/// Waits of one traffic class under one strategy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassReport {
    /// The class.
    pub name: String,
    /// Its requests.
    pub requests: u64,
    /// Those served.
    pub succeeded: u64,
    /// Mean wait from arrival to the provider's admission, of those served, in seconds.
    pub mean_wait_s: f64,
    /// 99th-percentile wait (nearest rank), in seconds.
    pub p99_wait_s: f64,
    /// The class's deadline on that wait, if it has one, in seconds.
    pub deadline_s: Option<f64>,
    /// Requests that waited longer than the deadline, or were never served.
    pub deadline_misses: u64,
}

/// One tenant's service while every tenant still had requests left.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TenantReport {
    /// The tenant.
    pub name: String,
    /// Its weight.
    pub weight: f64,
    /// Prompt plus completion tokens of its requests admitted in that period.
    pub served_tokens: u64,
}

/// One strategy's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StrategyReport {
    /// The strategy and its parameters.
    pub name: String,
    /// From the start to the last request's completion (or abandonment), in seconds.
    pub makespan_s: f64,
    /// Makespan ÷ the lower bound.
    pub bound_ratio: f64,
    /// Requests sent to the provider.
    pub attempts: u64,
    /// Provider refusals with status 429.
    pub provider_429s: u64,
    /// When the provider made its last 429, in seconds from the start.
    pub last_429_s: Option<f64>,
    /// Other provider refusals (5xx).
    pub other_errors: u64,
    /// Requests served.
    pub succeeded: u64,
    /// Served ÷ requests.
    pub success_rate: f64,
    /// Attempts ÷ requests.
    pub retry_amplification: f64,
    /// Tokens of served requests per minute of makespan, as the provider
    /// counts them on the token limit, ÷ that limit per minute.
    pub goodput: Option<f64>,
    /// Jain's index of per-tenant served tokens ÷ weight, while every tenant
    /// still had requests left: 1 is weighted-fair, 1/n is one tenant taking all;
    /// `None` when nobody was served, which is neither.
    pub jain_fairness: Option<f64>,
    /// Waits per class.
    pub classes: Vec<ClassReport>,
    /// Service per tenant.
    pub tenants: Vec<TenantReport>,
    /// Tokens admitted in each minute, as the provider counts them on the
    /// token limit (prompt plus completion if there is none).
    pub tokens_per_minute: Vec<u64>,
}

/// A scenario's results: the bound and every strategy's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// What it shows.
    pub description: String,
    /// Its seed.
    pub seed: u64,
    /// Requests in the workload.
    pub requests: usize,
    /// The lower bound on the makespan.
    pub bound: Bound,
    /// The token limit goodput and the plot refer to, if the provider has one.
    pub token_limit: Option<TokenLimit>,
    /// One entry per strategy, in the scenario's order.
    pub strategies: Vec<StrategyReport>,
}

const MINUTE_NS: u64 = 60_000_000_000;

/// A duration for people: `12.3s`, `19m 05.2s`, `1h 02m 03s`.
pub(crate) fn fmt_duration(seconds: f64) -> String {
    // Rounded to tenths before it is split, or 119.97 s would print as
    // "1m 60.0s"; rounded by the formatter, so figures round as they did.
    let text = format!("{seconds:.1}");
    let tenths = text.split_once('.').and_then(|(s, t)| Some(s.parse::<u64>().ok()? * 10 + t.parse::<u64>().ok()?));
    let Some(tenths) = tenths else {
        return format!("{text}s"); // negative or not finite: no split to make
    };
    if tenths < 600 {
        return format!("{}s", text.strip_suffix(".0").unwrap_or(&text));
    }
    if tenths < 36_000 {
        let rest = tenths % 600;
        return format!("{}m {:02}.{}s", tenths / 600, rest / 10, rest % 10);
    }
    let whole = seconds.round() as u64;
    format!("{}h {:02}m {:02}s", whole / 3600, whole % 3600 / 60, whole % 60)
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Jain's fairness index: (Σx)² ÷ (n Σx²); 1 when all are equal, none
/// when all are 0 (nobody served: 0 ÷ 0).
fn jain(xs: &[f64]) -> Option<f64> {
    let (sum, squares) = xs.iter().fold((0.0, 0.0), |(s, q), x| (s + x, q + x * x));
    (squares > 0.0).then(|| sum * sum / (xs.len() as f64 * squares))
}

fn classes(run: &Run, jobs: &[Job], checked: &Checked) -> Vec<ClassReport> {
    let mut reports = Vec::new();
    for (c, class) in checked.classes.iter().enumerate() {
        let members: Vec<usize> = jobs.iter().filter(|j| j.class == c).map(|j| j.id).collect();
        let mut waits: Vec<f64> = (members.iter())
            .filter(|&&id| run.outcomes[id].succeeded)
            .map(|&id| (run.outcomes[id].admitted_at.expect("served") - jobs[id].arrival) as f64 / 1e9)
            .collect();
        waits.sort_by(f64::total_cmp);
        let deadline_s = class.deadline_ns.map(|ns| ns as f64 / 1e9);
        let served = waits.len() as u64;
        let late = deadline_s.map_or(0, |d| waits.iter().filter(|&&w| w > d).count() as u64);
        reports.push(ClassReport {
            name: class.config.name.clone(),
            requests: members.len() as u64,
            succeeded: served,
            mean_wait_s: if waits.is_empty() { 0.0 } else { waits.iter().sum::<f64>() / waits.len() as f64 },
            p99_wait_s: percentile(&waits, 99.0),
            deadline_s,
            deadline_misses: if deadline_s.is_some() { late + members.len() as u64 - served } else { 0 },
        });
    }
    reports
}

/// Per-tenant tokens admitted until the first tenant had nothing left to
/// send: after that the others may take everything, fairly.
fn tenants(run: &Run, jobs: &[Job], checked: &Checked) -> Vec<TenantReport> {
    let done_at = |t: usize| {
        (jobs.iter().filter(|j| j.tenant == t))
            .map(|j| run.outcomes[j.id].admitted_at.unwrap_or(run.outcomes[j.id].ended_at))
            .max()
    };
    let contended_until = (0..checked.tenants.len()).filter_map(done_at).min().unwrap_or(0);
    let mut served = vec![0u64; checked.tenants.len()];
    for job in jobs {
        let outcome = &run.outcomes[job.id];
        if outcome.succeeded && outcome.admitted_at.is_some_and(|at| at <= contended_until) {
            served[job.tenant] += job.input_tokens + outcome.output_tokens;
        }
    }
    (checked.tenants.iter().zip(served))
        .map(|(t, served_tokens)| TenantReport { name: t.name.clone(), weight: t.weight, served_tokens })
        .collect()
}

/// One strategy's figures from its run.
pub(crate) fn strategy(
    name: String,
    run: &Run,
    jobs: &[Job],
    checked: &Checked,
    bound: &Bound,
    token_limit: Option<&TokenLimit>,
    charging: Charging,
) -> StrategyReport {
    let requests = jobs.len().max(1) as f64;
    let makespan_ns = run.outcomes.iter().map(|o| o.ended_at).max().unwrap_or(0);
    let makespan_s = makespan_ns as f64 / 1e9;
    let counted = |job: &Job| match token_limit {
        Some(limit) => charge(charging, limit.dimension, job) as u64,
        None => job.input_tokens + job.output_tokens(),
    };
    let mut tokens_per_minute = vec![0u64; makespan_ns.div_ceil(MINUTE_NS) as usize];
    let mut counted_total = 0u64;
    for job in jobs.iter().filter(|j| run.outcomes[j.id].succeeded) {
        let minute = (run.outcomes[job.id].admitted_at.expect("served") / MINUTE_NS) as usize;
        tokens_per_minute[minute] += counted(job);
        counted_total += counted(job);
    }
    let succeeded = run.outcomes.iter().filter(|o| o.succeeded).count() as u64;
    let tenants = tenants(run, jobs, checked);
    let fair_shares: Vec<f64> = tenants.iter().map(|t| t.served_tokens as f64 / t.weight).collect();
    StrategyReport {
        name,
        makespan_s,
        bound_ratio: makespan_s / bound.seconds,
        attempts: run.attempts,
        provider_429s: run.rejected_429,
        last_429_s: run.last_429_ns.map(|ns| ns as f64 / 1e9),
        other_errors: run.rejected_other,
        succeeded,
        success_rate: succeeded as f64 / requests,
        retry_amplification: run.attempts as f64 / requests,
        goodput: token_limit
            .filter(|_| makespan_s > 0.0)
            .map(|l| counted_total as f64 / (makespan_s / 60.0) / l.per_minute),
        jain_fairness: jain(&fair_shares),
        classes: classes(run, jobs, checked),
        tenants,
        tokens_per_minute,
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "scenario {}: {} requests, seed {}", self.scenario, self.requests, self.seed)?;
        if !self.description.is_empty() {
            writeln!(f, "{}", self.description)?;
        }
        writeln!(f, "lower bound {}, set by {}", fmt_duration(self.bound.seconds), self.bound.binding)?;
        for term in &self.bound.terms {
            writeln!(f, "  {:<22} {:>11}  {}", term.limit, fmt_duration(term.seconds), term.detail)?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "{:<38} {:>11} {:>7} {:>7} {:>8} {:>9} {:>8} {:>6}",
            "strategy", "makespan", "x bound", "429s", "success", "attempts", "goodput", "Jain"
        )?;
        for s in &self.strategies {
            let goodput = s.goodput.map_or("-".to_owned(), |g| format!("{:.1}%", g * 100.0));
            let jain = s.jain_fairness.map_or("-".to_owned(), |j| format!("{j:.3}"));
            writeln!(
                f,
                "{:<38} {:>11} {:>7.3} {:>7} {:>7.1}% {:>9.2} {:>8} {:>6}",
                s.name,
                fmt_duration(s.makespan_s),
                s.bound_ratio,
                s.provider_429s,
                s.success_rate * 100.0,
                s.retry_amplification,
                goodput,
                jain
            )?;
        }
        if let Some(limit) = &self.token_limit {
            writeln!(f, "(attempts per request; goodput: tokens admitted per minute / the {} limit)", limit.limit)?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "{:<38} {:<12} {:>11} {:>11} {:>9} {:>7}",
            "wait (arrival to admission)", "class", "mean", "p99", "deadline", "missed"
        )?;
        for s in &self.strategies {
            for c in &s.classes {
                let deadline = c.deadline_s.map_or("-".to_owned(), fmt_duration);
                let missed = c.deadline_s.map_or("-".to_owned(), |_| c.deadline_misses.to_string());
                let (mean, p99) = (fmt_duration(c.mean_wait_s), fmt_duration(c.p99_wait_s));
                writeln!(f, "{:<38} {:<12} {:>11} {:>11} {:>9} {:>7}", s.name, c.name, mean, p99, deadline, missed)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(fmt_duration(0.4), "0.4s");
        assert_eq!(fmt_duration(12.0), "12s");
        assert_eq!(fmt_duration(1145.25), "19m 05.2s");
        assert_eq!(fmt_duration(3723.0), "1h 02m 03s");
    }

    #[test]
    fn a_duration_rounding_up_carries_into_the_minute_and_the_hour() {
        assert_eq!(fmt_duration(119.97), "2m 00.0s");
        assert_eq!(fmt_duration(59.97), "1m 00.0s");
        assert_eq!(fmt_duration(3599.97), "1h 00m 00s");
        assert_eq!(fmt_duration(3599.6), "59m 59.6s");
    }

    #[test]
    fn jain_is_one_when_equal_and_falls_with_skew() {
        assert_eq!(jain(&[2.0, 2.0]), Some(1.0));
        assert!((jain(&[1.0, 0.0]).unwrap() - 0.5).abs() < 1e-12);
        // Equal service to weights 3 and 1.
        assert!((jain(&[1.0 / 3.0, 1.0]).unwrap() - 0.8).abs() < 1e-12);
        // Nobody served is not "perfectly fair" (it read 1.000).
        assert_eq!(jain(&[0.0, 0.0]), None);
    }

    #[test]
    fn p99_is_nearest_rank() {
        let values: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&values, 99.0), 198.0);
        assert_eq!(percentile(&[5.0], 99.0), 5.0);
    }
}
