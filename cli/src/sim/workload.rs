//! The requests of a run, drawn once from the scenario's seed so that every
//! strategy faces exactly the same workload.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, LogNormal};

use super::scenario::{ArrivalKind, Class, SizeConfig, Tenant};
use crate::provider::ProviderRequest;

/// The 95th percentile of the standard normal distribution: a log-normal's
/// sigma is ln(p95 / median) / Z95.
const Z95: f64 = 1.644_853_626_951_472_2;

const MINUTE_NS: f64 = 60e9;

/// One request of the workload.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Job {
    /// Index into the workload, in arrival order.
    pub id: usize,
    pub arrival: u64,
    pub class: usize,
    pub tenant: usize,
    pub input_tokens: u64,
    pub prompt_chars: u64,
    pub max_tokens: u64,
    /// How long the answer would be without `max_tokens`.
    pub desired_output: u64,
}

impl Job {
    /// What the provider sees.
    pub fn request(&self) -> ProviderRequest {
        ProviderRequest {
            key: "sim".to_owned(),
            input_tokens: self.input_tokens,
            prompt_chars: self.prompt_chars,
            max_tokens: self.max_tokens,
            desired_output_tokens: self.desired_output,
        }
    }

    /// The completion tokens it gets.
    pub fn output_tokens(&self) -> u64 {
        self.desired_output.min(self.max_tokens)
    }

    /// OpenAI's estimate of the prompt: its characters ÷ 4.
    pub fn prompt_estimate(&self) -> u64 {
        self.prompt_chars.div_ceil(4)
    }
}

/// A size drawn from a log-normal through the median and p95, clamped.
struct Size {
    dist: Option<LogNormal<f64>>,
    median: f64,
    min: u64,
    max: u64,
}

impl Size {
    fn new(config: &SizeConfig) -> Self {
        let sigma = config.p95.map_or(0.0, |p95| (p95 / config.median).ln() / Z95);
        let dist = (sigma > 0.0).then(|| LogNormal::new(config.median.ln(), sigma).expect("sigma is positive"));
        Size {
            dist,
            median: config.median,
            min: config.min.unwrap_or(1).max(1),
            max: config.max.unwrap_or(llmgov::MAX_TOKENS),
        }
    }

    fn draw(&self, rng: &mut ChaCha8Rng) -> u64 {
        let value = self.dist.as_ref().map_or(self.median, |d| d.sample(rng));
        (value.round() as u64).clamp(self.min, self.max)
    }
}

/// Arrival times of one class, in order.
fn arrivals(class: &Class, rng: &mut ChaCha8Rng) -> Vec<u64> {
    let n = class.config.requests;
    let start = class.start_ns;
    match class.config.arrival.kind {
        ArrivalKind::AllAtOnce => vec![start; n as usize],
        ArrivalKind::Poisson => {
            let per_minute = class.config.arrival.per_minute.expect("checked: poisson has a rate");
            let gap = Exp::new(per_minute / MINUTE_NS).expect("checked: the rate is positive");
            let mut t = start as f64;
            (0..n)
                .map(|_| {
                    t += gap.sample(rng);
                    t as u64
                })
                .collect()
        }
        ArrivalKind::Bursts => {
            let size = class.config.arrival.size.expect("checked: bursts have a size");
            let every = class.every_ns.expect("checked: bursts have a period");
            (0..n).map(|i| start.saturating_add((i / size).saturating_mul(every))).collect()
        }
    }
}

/// Picks a tenant in proportion to the shares.
fn tenant(tenants: &[Tenant], total_share: f64, rng: &mut ChaCha8Rng) -> usize {
    let mut draw = rng.random::<f64>() * total_share;
    for (i, t) in tenants.iter().enumerate() {
        if draw < t.share {
            return i;
        }
        draw -= t.share;
    }
    tenants.len() - 1
}

/// Draws every request of every class from `seed`, sorted by arrival (ties
/// by class, then by draw order), numbered in that order.
pub(crate) fn generate(seed: u64, classes: &[Class], tenants: &[Tenant]) -> Vec<Job> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let total_share: f64 = tenants.iter().map(|t| t.share).sum();
    let mut jobs = Vec::new();
    for (c, class) in classes.iter().enumerate() {
        let (input, output) = (Size::new(&class.config.input_tokens), Size::new(&class.config.output_tokens));
        for arrival in arrivals(class, &mut rng) {
            let input_tokens = input.draw(&mut rng);
            jobs.push(Job {
                id: 0,
                arrival,
                class: c,
                tenant: tenant(tenants, total_share, &mut rng),
                input_tokens,
                prompt_chars: (input_tokens as f64 * class.chars_per_token).round() as u64,
                max_tokens: class.config.max_tokens,
                desired_output: output.draw(&mut rng),
            });
        }
    }
    // A stable sort keeps each class's draw order among equal arrivals.
    jobs.sort_by_key(|j| (j.arrival, j.class));
    for (id, job) in jobs.iter_mut().enumerate() {
        job.id = id;
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::scenario::{ArrivalConfig, ClassConfig};

    fn class(kind: ArrivalKind, p95: Option<f64>) -> Class {
        let size = SizeConfig { median: 1000.0, p95, min: None, max: Some(5000) };
        let arrival =
            ArrivalConfig { kind, start: None, per_minute: Some(60.0), size: Some(10), every: Some("1m".into()) };
        let config = ClassConfig {
            name: "c".into(),
            requests: 2000,
            arrival,
            input_tokens: size.clone(),
            output_tokens: size,
            max_tokens: 100,
            chars_per_token: None,
            deadline: None,
        };
        Class { config, start_ns: 0, every_ns: Some(60_000_000_000), deadline_ns: None, chars_per_token: 4.0 }
    }

    #[test]
    fn log_normal_sizes_hit_the_median_and_p95() {
        let tenants = [Tenant { name: "t".into(), weight: 1.0, share: 1.0 }];
        let jobs = generate(1, &[class(ArrivalKind::AllAtOnce, Some(2000.0))], &tenants);
        let mut sizes: Vec<u64> = jobs.iter().map(|j| j.input_tokens).collect();
        sizes.sort_unstable();
        let (median, p95) = (sizes[1000] as f64, sizes[1900] as f64);
        assert!((900.0..1100.0).contains(&median), "median {median}");
        assert!((1800.0..2200.0).contains(&p95), "p95 {p95}");
        assert!(sizes.iter().all(|&s| (1..=5000).contains(&s)));
        assert!(jobs.iter().all(|j| j.prompt_chars == j.input_tokens * 4));
    }

    #[test]
    fn poisson_and_burst_arrivals_keep_their_rate() {
        let tenants = [Tenant { name: "t".into(), weight: 1.0, share: 1.0 }];
        let jobs = generate(1, &[class(ArrivalKind::Poisson, None)], &tenants);
        let last_minutes = jobs.last().unwrap().arrival as f64 / MINUTE_NS;
        assert!((55.0..65.0).contains(&(2000.0 / last_minutes)), "{last_minutes} minutes for 2000 at 60/min");
        let jobs = generate(1, &[class(ArrivalKind::Bursts, None)], &tenants);
        assert_eq!(jobs[9].arrival, 0);
        assert_eq!(jobs[10].arrival, 60_000_000_000);
        assert_eq!(jobs.last().unwrap().arrival, 199 * 60_000_000_000);
    }
}
