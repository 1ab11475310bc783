//! `planCapacity`: the core's capacity planner (what `llmgov plan` prints and
//! Python's `plan_capacity` returns), options camelCased.
//!
//! The TypeScript layer (`ts/plan.ts`) checks the options' shape (an
//! object, no unknown option, every value a finite number, the averages
//! given); the core checks their values (positive limits, utilisation in
//! (0, 1], at least one limit) and names the field, which `errors.rs`
//! camelCases.

use llmgov::plan::{self, PlanInput};
use napi::{Env, Result};
use napi_derive::napi;

use crate::errors::OrThrow;

/// A deployment's limits and a workload's shape, as the TypeScript layer
/// passes them (checked to be finite numbers).
#[napi(object)]
pub struct PlanOptions {
    /// Average input tokens per request.
    pub avg_input: f64,
    /// Average output tokens per request.
    pub avg_output: f64,
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
    /// 95th-percentile input tokens.
    pub p95_input: Option<f64>,
    /// 95th-percentile output tokens (what a reservation holds).
    pub p95_output: Option<f64>,
    /// Average request latency in seconds (5 by default).
    pub latency: Option<f64>,
    /// Fraction of the limits to plan for, in (0, 1] (0.9 by default).
    pub utilisation: Option<f64>,
}

/// One limit's ceiling on requests per minute.
#[napi(object)]
pub struct PlanCeiling {
    /// The limit, as the core names it: `rpm`, `tpm`, `input_tpm`,
    /// `output_tpm` or `concurrency`.
    pub limit: String,
    /// Requests per minute it allows at 100% utilisation; `Infinity` for a
    /// limit on tokens the requests do not use.
    pub rpm: f64,
}

/// The plan: every ceiling, the binding one, and the sustainable rate.
#[napi(object, use_nullable = true)]
pub struct CapacityPlan {
    /// Each given limit's ceiling, for average-sized requests, in the order
    /// `rpm`, `tpm`, `input_tpm`, `output_tpm`, `concurrency`.
    pub ceilings: Vec<PlanCeiling>,
    /// The limit with the lowest ceiling.
    pub binding: String,
    /// Sustainable requests per minute: the lowest ceiling × utilisation.
    pub sustainable_rpm: f64,
    /// The same while reservations hold p95 sizes (as llmgov's do until they
    /// are settled); `null` unless `p95Input` or `p95Output` was given.
    pub sustainable_rpm_reserving_p95: Option<f64>,
}

impl From<PlanOptions> for PlanInput {
    fn from(o: PlanOptions) -> Self {
        let defaults = PlanInput::default();
        PlanInput {
            rpm: o.rpm,
            tpm: o.tpm,
            input_tpm: o.input_tpm,
            output_tpm: o.output_tpm,
            concurrency: o.concurrency,
            avg_input: o.avg_input,
            p95_input: o.p95_input,
            avg_output: o.avg_output,
            p95_output: o.p95_output,
            latency: o.latency.unwrap_or(defaults.latency),
            utilisation: o.utilisation.unwrap_or(defaults.utilisation),
        }
    }
}

impl From<plan::Plan> for CapacityPlan {
    fn from(plan: plan::Plan) -> Self {
        CapacityPlan {
            ceilings: plan.ceilings.iter().map(|c| PlanCeiling { limit: c.limit.to_owned(), rpm: c.rpm }).collect(),
            binding: plan.binding.to_owned(),
            sustainable_rpm: plan.sustainable_rpm,
            sustainable_rpm_reserving_p95: plan.sustainable_rpm_reserving_p95,
        }
    }
}

/// How many requests a minute a set of limits sustains for a workload's
/// shape, and which limit binds (as `llmgov plan`). Bad values throw
/// `InvalidRequestError` naming the option.
#[napi(js_name = "nativePlanCapacity", catch_unwind)]
pub fn plan_capacity(env: Env, options: PlanOptions) -> Result<CapacityPlan> {
    Ok(PlanInput::from(options).plan().or_throw(&env)?.into())
}
