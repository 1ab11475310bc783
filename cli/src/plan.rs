//! `llmgov plan`: how many requests a minute a set of limits sustains, and
//! which limit binds.

use serde::Serialize;

use crate::error::CliError;

/// A deployment's limits and a workload's shape. Unset limits do not bind.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct PlanInput {
    /// Requests per minute.
    #[arg(long)]
    pub rpm: Option<f64>,
    /// Total (input + output) tokens per minute.
    #[arg(long)]
    pub tpm: Option<f64>,
    /// Input tokens per minute.
    #[arg(long = "input-tpm")]
    pub input_tpm: Option<f64>,
    /// Output tokens per minute.
    #[arg(long = "output-tpm")]
    pub output_tpm: Option<f64>,
    /// Requests in flight at once.
    #[arg(long)]
    pub concurrency: Option<f64>,
    /// Average input tokens per request.
    #[arg(long = "avg-input")]
    pub avg_input: f64,
    /// 95th-percentile input tokens.
    #[arg(long = "p95-input")]
    pub p95_input: Option<f64>,
    /// Average output tokens per request.
    #[arg(long = "avg-output")]
    pub avg_output: f64,
    /// 95th-percentile output tokens (what a reservation holds).
    #[arg(long = "p95-output")]
    pub p95_output: Option<f64>,
    /// Average request latency in seconds.
    #[arg(long, default_value_t = 5.0)]
    pub latency: f64,
    /// Fraction of the limits to plan for.
    #[arg(long, default_value_t = 0.9)]
    pub utilisation: f64,
}

/// One limit's ceiling on requests per minute.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ceiling {
    /// The limit, e.g. `tpm`.
    pub limit: &'static str,
    /// Requests per minute it allows, at 100%.
    pub rpm: f64,
}

/// The plan: every ceiling, the binding one, and the sustainable rate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// Each set limit's ceiling, for average-sized requests.
    pub ceilings: Vec<Ceiling>,
    /// The lowest ceiling.
    pub binding: &'static str,
    /// Sustainable requests per minute: the lowest ceiling × utilisation.
    pub sustainable_rpm: f64,
    /// The same while reservations hold p95 sizes (as llmgov's do until
    /// they are settled), if p95s were given.
    pub sustainable_rpm_reserving_p95: Option<f64>,
}

impl PlanInput {
    fn check(&self) -> Result<(), CliError> {
        let positive = [
            ("avg-input", Some(self.avg_input)),
            ("avg-output", Some(self.avg_output)),
            ("latency", Some(self.latency)),
        ];
        for (name, value) in positive.into_iter().chain([
            ("rpm", self.rpm),
            ("tpm", self.tpm),
            ("input-tpm", self.input_tpm),
            ("output-tpm", self.output_tpm),
            ("concurrency", self.concurrency),
            ("p95-input", self.p95_input),
            ("p95-output", self.p95_output),
        ]) {
            if let Some(v) = value {
                if !(v.is_finite() && v >= 0.0) || (v == 0.0 && name != "avg-input" && name != "avg-output") {
                    return Err(CliError::field(format!("--{name}"), v, "must be a positive number"));
                }
            }
        }
        if !(self.utilisation > 0.0 && self.utilisation <= 1.0) {
            return Err(CliError::field("--utilisation", self.utilisation, "must be in (0, 1]"));
        }
        if [self.rpm, self.tpm, self.input_tpm, self.output_tpm, self.concurrency].iter().all(Option::is_none) {
            return Err(CliError::field(
                "--rpm/--tpm/--input-tpm/--output-tpm/--concurrency",
                "none",
                "give at least one limit",
            ));
        }
        Ok(())
    }

    fn ceilings(&self, input: f64, output: f64) -> Vec<Ceiling> {
        let per = |limit: Option<f64>, per_request: f64| {
            limit.map(|l| if per_request > 0.0 { l / per_request } else { f64::INFINITY })
        };
        [
            ("rpm", self.rpm),
            ("tpm", per(self.tpm, input + output)),
            ("input_tpm", per(self.input_tpm, input)),
            ("output_tpm", per(self.output_tpm, output)),
            ("concurrency", self.concurrency.map(|c| c * 60.0 / self.latency)),
        ]
        .into_iter()
        .filter_map(|(limit, rpm)| rpm.map(|rpm| Ceiling { limit, rpm }))
        .collect()
    }

    /// Works out the plan.
    pub fn plan(&self) -> Result<Plan, CliError> {
        self.check()?;
        let ceilings = self.ceilings(self.avg_input, self.avg_output);
        let lowest =
            |c: &[Ceiling]| c.iter().min_by(|a, b| a.rpm.total_cmp(&b.rpm)).cloned().expect("at least one limit");
        let binding = lowest(&ceilings);
        let reserving = (self.p95_input.is_some() || self.p95_output.is_some()).then(|| {
            let input = self.p95_input.unwrap_or(self.avg_input);
            let output = self.p95_output.unwrap_or(self.avg_output);
            lowest(&self.ceilings(input, output)).rpm * self.utilisation
        });
        Ok(Plan {
            binding: binding.limit,
            sustainable_rpm: binding.rpm * self.utilisation,
            sustainable_rpm_reserving_p95: reserving,
            ceilings,
        })
    }
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{:<12} {:>14}", "limit", "requests/min")?;
        for c in &self.ceilings {
            let mark = if c.limit == self.binding { "  <- binds" } else { "" };
            writeln!(f, "{:<12} {:>14.1}{mark}", c.limit, c.rpm)?;
        }
        writeln!(f, "sustainable: {:.1} requests/min ({} binds)", self.sustainable_rpm, self.binding)?;
        if let Some(rpm) = self.sustainable_rpm_reserving_p95 {
            writeln!(f, "while reservations hold p95 sizes: {rpm:.1} requests/min")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed_batch() -> PlanInput {
        PlanInput {
            rpm: Some(60.0),
            tpm: Some(100_000.0),
            avg_input: 1500.0,
            avg_output: 500.0,
            latency: 10.0,
            utilisation: 1.0,
            ..Default::default()
        }
    }

    #[test]
    fn the_seed_batch_case_is_token_bound_at_50_a_minute() {
        let plan = seed_batch().plan().unwrap();
        assert_eq!(plan.binding, "tpm");
        assert!((plan.sustainable_rpm - 50.0).abs() < 1e-9);
    }

    #[test]
    fn concurrency_binds_long_requests() {
        let input = PlanInput { concurrency: Some(10.0), latency: 30.0, ..seed_batch() };
        let plan = input.plan().unwrap();
        assert_eq!((plan.binding, plan.sustainable_rpm), ("concurrency", 20.0));
    }

    #[test]
    fn p95_reservations_lower_the_rate_and_utilisation_scales_it() {
        let input = PlanInput { p95_output: Some(1500.0), utilisation: 0.9, ..seed_batch() };
        let plan = input.plan().unwrap();
        assert!((plan.sustainable_rpm - 45.0).abs() < 1e-9);
        assert!((plan.sustainable_rpm_reserving_p95.unwrap() - 30.0).abs() < 1e-9);
    }

    #[test]
    fn bad_input_names_the_flag() {
        let err = PlanInput { rpm: Some(-1.0), ..seed_batch() }.plan().unwrap_err().to_string();
        assert!(err.contains("--rpm") && err.contains("-1"), "{err}");
        let err = PlanInput { rpm: None, tpm: None, ..seed_batch() }.plan().unwrap_err().to_string();
        assert!(err.contains("at least one limit"), "{err}");
    }
}
