//! Capacity planning: how many requests a minute a set of limits sustains
//! for a workload's shape, and which limit binds. The `llmgov plan` command
//! and every binding's `plan_capacity` call this.
//!
//! ```
//! use llmgov::plan::PlanInput;
//!
//! // The seed article's batch case: 60 RPM and 100k TPM, 2000-token requests.
//! let plan = PlanInput {
//!     rpm: Some(60.0),
//!     tpm: Some(100_000.0),
//!     avg_input: 1500.0,
//!     avg_output: 500.0,
//!     utilisation: 1.0,
//!     ..PlanInput::default()
//! }
//! .plan()?;
//! assert_eq!(plan.binding, "tpm");
//! assert_eq!(plan.sustainable_rpm, 50.0);
//! # Ok::<(), llmgov::Error>(())
//! ```

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A deployment's limits and a workload's shape. Unset limits do not bind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PlanInput {
    /// Requests per minute.
    pub rpm: Option<f64>,
    /// Total (input + output) tokens per minute.
    pub tpm: Option<f64>,
    /// Input tokens per minute.
    pub input_tpm: Option<f64>,
    /// Output tokens per minute.
    pub output_tpm: Option<f64>,
    /// Requests in flight at once.
    pub concurrency: Option<f64>,
    /// Average input tokens per request.
    pub avg_input: f64,
    /// 95th-percentile input tokens.
    pub p95_input: Option<f64>,
    /// Average output tokens per request.
    pub avg_output: f64,
    /// 95th-percentile output tokens (what a reservation holds).
    pub p95_output: Option<f64>,
    /// Average request latency in seconds (bounds the rate under a
    /// concurrency limit; only then must it be positive).
    pub latency: f64,
    /// Fraction of the limits to plan for, in (0, 1].
    pub utilisation: f64,
}

impl Default for PlanInput {
    /// No limits, empty requests, 5 s latency, 90% utilisation.
    fn default() -> Self {
        PlanInput {
            rpm: None,
            tpm: None,
            input_tpm: None,
            output_tpm: None,
            concurrency: None,
            avg_input: 0.0,
            p95_input: None,
            avg_output: 0.0,
            p95_output: None,
            latency: 5.0,
            utilisation: 0.9,
        }
    }
}

/// One limit's ceiling on requests per minute.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ceiling {
    /// The limit: `rpm`, `tpm`, `input_tpm`, `output_tpm` or `concurrency`.
    pub limit: &'static str,
    /// Requests per minute it allows, at 100%. Infinite for a limit that
    /// never binds; serialized by leaving `rpm` out, since JSON has no
    /// infinity and serde would write `null`, which reads as unknown.
    #[serde(skip_serializing_if = "is_unbounded")]
    pub rpm: f64,
}

fn is_unbounded(rpm: &f64) -> bool {
    rpm.is_infinite()
}

/// The plan: every ceiling, the binding one, and the sustainable rate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// Each set limit's ceiling, for average-sized requests (infinite for a
    /// token limit such requests cost nothing on: no output, say).
    pub ceilings: Vec<Ceiling>,
    /// The lowest ceiling.
    pub binding: &'static str,
    /// Sustainable requests per minute: the lowest ceiling × utilisation.
    pub sustainable_rpm: f64,
    /// The same while reservations hold p95 sizes (as llmgov's do until
    /// they are settled), if p95s were given.
    pub sustainable_rpm_reserving_p95: Option<f64>,
}

/// The names of the limits, as [`Error::InvalidRequest`] gives them when none is set.
pub const LIMIT_FIELDS: &str = "rpm/tpm/input_tpm/output_tpm/concurrency";

fn bad(field: &'static str, value: f64, reason: &str) -> Error {
    Error::InvalidRequest { field, value: value.to_string(), reason: reason.to_owned() }
}

impl PlanInput {
    /// Checks every field; an error names the field (as spelled here) and its value.
    fn check(&self) -> Result<()> {
        // Token averages may be 0 (a request of no output); everything else
        // must be positive.
        let may_be_zero = [("avg_input", self.avg_input), ("avg_output", self.avg_output)];
        for (field, value) in may_be_zero {
            if !(value.is_finite() && value >= 0.0) {
                return Err(bad(field, value, "must be a non-negative number"));
            }
        }
        if !(self.latency.is_finite() && self.latency >= 0.0) {
            return Err(bad("latency", self.latency, "must be a non-negative number"));
        }
        // Only a concurrency limit divides by the latency.
        if self.concurrency.is_some() && self.latency == 0.0 {
            return Err(bad("latency", self.latency, "must be a positive number with a concurrency limit"));
        }
        let positive = [
            ("rpm", self.rpm),
            ("tpm", self.tpm),
            ("input_tpm", self.input_tpm),
            ("output_tpm", self.output_tpm),
            ("concurrency", self.concurrency),
            ("p95_input", self.p95_input),
            ("p95_output", self.p95_output),
        ];
        for (field, value) in positive {
            if let Some(v) = value.filter(|v| !(v.is_finite() && *v > 0.0)) {
                return Err(bad(field, v, "must be a positive number"));
            }
        }
        let percentiles = [
            ("p95_input/avg_input", self.p95_input, self.avg_input),
            ("p95_output/avg_output", self.p95_output, self.avg_output),
        ];
        for (field, p95, avg) in percentiles {
            if let Some(p95) = p95.filter(|p95| *p95 < avg) {
                let (value, reason) = (format!("{p95}/{avg}"), "a p95 size cannot be below the average".to_owned());
                return Err(Error::InvalidRequest { field, value, reason });
            }
        }
        if !(self.utilisation > 0.0 && self.utilisation <= 1.0) {
            return Err(bad("utilisation", self.utilisation, "must be in (0, 1]"));
        }
        if [self.rpm, self.tpm, self.input_tpm, self.output_tpm, self.concurrency].iter().all(Option::is_none) {
            let reason = "give at least one limit".to_owned();
            return Err(Error::InvalidRequest { field: LIMIT_FIELDS, value: "none".to_owned(), reason });
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

    /// Works out the plan: each set limit's ceiling on requests per minute,
    /// min(RPM, TPM ÷ tokens, ITPM ÷ input, OTPM ÷ output, concurrency × 60
    /// ÷ latency) × utilisation, and the limit that binds. Bad input is
    /// [`Error::InvalidRequest`] naming the field.
    pub fn plan(&self) -> Result<Plan> {
        self.check()?;
        let ceilings = self.ceilings(self.avg_input, self.avg_output);
        let lowest =
            |c: &[Ceiling]| c.iter().min_by(|a, b| a.rpm.total_cmp(&b.rpm)).cloned().expect("at least one limit");
        let binding = lowest(&ceilings);
        if binding.rpm.is_infinite() {
            return Err(Error::InvalidRequest {
                field: "avg_input/avg_output",
                value: format!("{}/{}", self.avg_input, self.avg_output),
                reason: "every limit given counts tokens that such requests do not have, so none bounds them; give \
                         the requests' sizes, or a rpm or concurrency limit"
                    .to_owned(),
            });
        }
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
    fn bad_input_names_the_field() {
        let err = PlanInput { rpm: Some(-1.0), ..seed_batch() }.plan().unwrap_err();
        assert!(matches!(&err, Error::InvalidRequest { field: "rpm", value, .. } if value == "-1"), "{err}");
        let err = PlanInput { rpm: None, tpm: None, ..seed_batch() }.plan().unwrap_err();
        assert!(matches!(&err, Error::InvalidRequest { field: LIMIT_FIELDS, .. }), "{err}");
        assert!(err.to_string().contains("at least one limit"), "{err}");
        let err = PlanInput { utilisation: 1.5, ..seed_batch() }.plan().unwrap_err();
        assert!(matches!(&err, Error::InvalidRequest { field: "utilisation", .. }), "{err}");
        let err = PlanInput { avg_output: f64::NAN, ..seed_batch() }.plan().unwrap_err();
        assert!(matches!(&err, Error::InvalidRequest { field: "avg_output", .. }), "{err}");
    }

    /// Found by the CLI audit: token limits only, for requests of no tokens,
    /// planned an infinite rate (`null` in JSON) with `tpm` "binding".
    #[test]
    fn limits_that_requests_cost_nothing_on_bound_nothing() {
        let unbounded = PlanInput { rpm: None, avg_input: 0.0, avg_output: 0.0, ..seed_batch() };
        let err = unbounded.plan().unwrap_err();
        assert!(matches!(&err, Error::InvalidRequest { field: "avg_input/avg_output", value, .. } if value == "0/0"));
        // One such limit beside a limit that binds is only infinite.
        let plan = PlanInput { output_tpm: Some(1000.0), avg_output: 0.0, ..seed_batch() }.plan().unwrap();
        assert_eq!(plan.ceilings[2].limit, "output_tpm");
        assert!(plan.ceilings[2].rpm.is_infinite());
        assert_eq!((plan.binding, plan.sustainable_rpm), ("rpm", 60.0));
    }
}
