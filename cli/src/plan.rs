//! `llmgov plan`: how many requests a minute a set of limits sustains, and
//! which limit binds.

use serde::Serialize;

use crate::error::CliError;

/// A deployment's limits and a workload's shape, as `llmgov plan` reads
/// them. Unset limits do not bind. The planning is the core's
/// ([`llmgov::plan`]); this adds the flags and the table.
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

/// The core's plan, printed as `llmgov plan`'s table (its JSON is the
/// core's).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Plan(pub llmgov::Plan);

impl PlanInput {
    /// The core's input.
    fn core(&self) -> llmgov::PlanInput {
        llmgov::PlanInput {
            rpm: self.rpm,
            tpm: self.tpm,
            input_tpm: self.input_tpm,
            output_tpm: self.output_tpm,
            concurrency: self.concurrency,
            avg_input: self.avg_input,
            p95_input: self.p95_input,
            avg_output: self.avg_output,
            p95_output: self.p95_output,
            latency: self.latency,
            utilisation: self.utilisation,
        }
    }

    /// Works out the plan; an error names the flag at fault.
    pub fn plan(&self) -> Result<Plan, CliError> {
        self.core().plan().map(Plan).map_err(|error| match error {
            llmgov::Error::InvalidRequest { field, value, reason } => CliError::field(flags(field), value, reason),
            other => CliError::Core(other),
        })
    }
}

/// The flags of a core field name, e.g. `input_tpm` → `--input-tpm`.
fn flags(field: &str) -> String {
    field.split('/').map(|name| format!("--{}", name.replace('_', "-"))).collect::<Vec<_>>().join("/")
}

/// A rate for the table: one decimal from 1 a minute up, three significant
/// digits below (a limit of a few a day is not "0.0"), `unbounded` for a
/// limit that a request of no tokens never reaches.
fn rate(rpm: f64) -> String {
    if rpm.is_infinite() {
        "unbounded".to_owned()
    } else if rpm >= 1.0 || rpm == 0.0 {
        format!("{rpm:.1}")
    } else {
        let decimals = (2.0 - rpm.log10().floor()).max(1.0) as usize;
        format!("{rpm:.decimals$}")
    }
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Plan(plan) = self;
        writeln!(f, "{:<12} {:>14}", "limit", "requests/min")?;
        for c in &plan.ceilings {
            let mark = if c.limit == plan.binding { "  <- binds" } else { "" };
            writeln!(f, "{:<12} {:>14}{mark}", c.limit, rate(c.rpm))?;
        }
        writeln!(f, "sustainable: {} requests/min ({} binds)", rate(plan.sustainable_rpm), plan.binding)?;
        if let Some(rpm) = plan.sustainable_rpm_reserving_p95 {
            writeln!(f, "while reservations hold p95 sizes: {} requests/min", rate(rpm))?;
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
    fn the_table_marks_the_binding_limit() {
        let table = seed_batch().plan().unwrap().to_string();
        let tpm = table.lines().find(|line| line.starts_with("tpm ")).expect("a tpm row");
        assert!(tpm.ends_with("50.0  <- binds"), "{table}");
        assert!(table.contains("sustainable: 50.0 requests/min (tpm binds)"), "{table}");
    }

    /// A tenth of a request a minute printed as "0.0", a sustainable rate
    /// of nothing; a ceiling of 0-token requests on a token limit as "inf".
    /// A plan that nothing bounds is refused, naming the sizes.
    #[test]
    fn small_rates_keep_their_digits_and_unbounded_plans_are_refused() {
        let daily = PlanInput { rpm: Some(0.05), ..seed_batch() }.plan().unwrap().to_string();
        assert!(daily.contains("sustainable: 0.0500 requests/min (rpm binds)"), "{daily}");
        let empty = PlanInput { rpm: None, avg_input: 0.0, avg_output: 0.0, ..seed_batch() };
        let err = empty.plan().unwrap_err().to_string();
        assert!(err.contains("--avg-input/--avg-output") && err.contains("0/0"), "{err}");
        let no_output = PlanInput { output_tpm: Some(1000.0), avg_output: 0.0, ..seed_batch() };
        let table = no_output.plan().unwrap().to_string();
        assert!(table.contains("output_tpm        unbounded"), "{table}");
        assert_eq!(rate(0.0012345), "0.00123");
        assert_eq!(rate(45.0), "45.0");
    }

    /// Serde wrote an infinite ceiling as `"rpm": null`, which reads as unknown.
    #[test]
    fn json_leaves_out_the_rpm_of_an_unbounded_ceiling() {
        let no_output = PlanInput { output_tpm: Some(1000.0), avg_output: 0.0, ..seed_batch() };
        let json = serde_json::to_value(no_output.plan().unwrap()).unwrap();
        let ceilings = json["ceilings"].as_array().unwrap();
        let output = ceilings.iter().find(|c| c["limit"] == "output_tpm").unwrap();
        assert_eq!(output, &serde_json::json!({"limit": "output_tpm"}), "{json}");
        let rpm = ceilings.iter().find(|c| c["limit"] == "rpm").unwrap();
        assert_eq!(rpm["rpm"], 60.0, "{json}");
    }

    #[test]
    fn latency_is_checked_only_where_concurrency_uses_it() {
        assert!(PlanInput { latency: 0.0, ..seed_batch() }.plan().is_ok());
        let err = PlanInput { latency: 0.0, concurrency: Some(4.0), ..seed_batch() }.plan().unwrap_err().to_string();
        assert!(err.contains("--latency") && err.contains('0'), "{err}");
        let err = PlanInput { latency: -1.0, ..seed_batch() }.plan().unwrap_err().to_string();
        assert!(err.contains("--latency") && err.contains("-1"), "{err}");
    }

    #[test]
    fn a_p95_below_its_average_is_refused_naming_both_flags() {
        let err = PlanInput { p95_output: Some(100.0), ..seed_batch() }.plan().unwrap_err().to_string();
        assert!(err.contains("--p95-output/--avg-output") && err.contains("100/500"), "{err}");
        let err = PlanInput { p95_input: Some(1000.0), ..seed_batch() }.plan().unwrap_err().to_string();
        assert!(err.contains("--p95-input/--avg-input") && err.contains("1000/1500"), "{err}");
        assert!(PlanInput { p95_output: Some(500.0), ..seed_batch() }.plan().is_ok());
    }

    #[test]
    fn bad_input_names_the_flag() {
        let err = PlanInput { rpm: Some(-1.0), ..seed_batch() }.plan().unwrap_err().to_string();
        assert!(err.contains("--rpm") && err.contains("-1"), "{err}");
        let err = PlanInput { input_tpm: Some(0.0), ..seed_batch() }.plan().unwrap_err().to_string();
        assert!(err.contains("--input-tpm"), "{err}");
        let err = PlanInput { rpm: None, tpm: None, ..seed_batch() }.plan().unwrap_err().to_string();
        assert!(err.contains("at least one limit") && err.contains("--rpm/--tpm/--input-tpm"), "{err}");
    }
}
