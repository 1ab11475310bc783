//! `llmgov_plan_capacity`: the core's capacity planner (what `llmgov plan`
//! prints and Python's `plan_capacity` returns), from a plain input struct
//! to a plain result struct. Nothing is allocated for the caller: the
//! result's strings are static.

use std::ffi::{c_char, CStr};

use llmgov_core::plan::{Plan, PlanInput};

use crate::args::{self, Out};
use crate::errors::{guard, llmgov_result, Failure, Outcome};

/// How many limits the planner knows (`rpm`, `tpm`, `input_tpm`,
/// `output_tpm`, `concurrency`): the length of `llmgov_plan.ceilings`.
pub const LLMGOV_PLAN_LIMITS: usize = 5;

/// A deployment's limits and a workload's shape, for
/// `llmgov_plan_capacity`.
///
/// Each optional value has a `has_<field>` flag beside it, as
/// `llmgov_request`'s `has_deadline` does: a field is read only when its
/// flag is true, so a zeroed struct sets nothing. A flag rather than a
/// sentinel (0 or NaN meaning "unset") keeps every number meaningful: a
/// limit given as 0, a negative or a NaN is refused with
/// `LLMGOV_RESULT_INVALID_REQUEST` naming the field, as the core and the
/// other languages refuse it, instead of silently meaning "no limit".
///
/// Give at least one limit (`rpm`, `tpm`, `input_tpm`, `output_tpm`,
/// `concurrency`); unset limits do not bind.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct llmgov_plan_input {
    /// Requests per minute; read only when `has_rpm` is true.
    pub rpm: f64,
    /// Whether `rpm` is set.
    pub has_rpm: bool,
    /// Total (input + output) tokens per minute; read only when `has_tpm`.
    pub tpm: f64,
    /// Whether `tpm` is set.
    pub has_tpm: bool,
    /// Input tokens per minute; read only when `has_input_tpm`.
    pub input_tpm: f64,
    /// Whether `input_tpm` is set.
    pub has_input_tpm: bool,
    /// Output tokens per minute; read only when `has_output_tpm`.
    pub output_tpm: f64,
    /// Whether `output_tpm` is set.
    pub has_output_tpm: bool,
    /// Requests in flight at once; read only when `has_concurrency`.
    pub concurrency: f64,
    /// Whether `concurrency` is set.
    pub has_concurrency: bool,
    /// Average input tokens per request (0 or more).
    pub avg_input: f64,
    /// Average output tokens per request (0 or more).
    pub avg_output: f64,
    /// 95th-percentile input tokens; read only when `has_p95_input`.
    pub p95_input: f64,
    /// Whether `p95_input` is set.
    pub has_p95_input: bool,
    /// 95th-percentile output tokens (what a reservation holds); read only
    /// when `has_p95_output`.
    pub p95_output: f64,
    /// Whether `p95_output` is set.
    pub has_p95_output: bool,
    /// Average request latency in seconds (bounds the rate under a
    /// concurrency limit); read only when `has_latency`, else 5.
    pub latency: f64,
    /// Whether `latency` is set.
    pub has_latency: bool,
    /// Fraction of the limits to plan for, in (0, 1]; read only when
    /// `has_utilisation`, else 0.9.
    pub utilisation: f64,
    /// Whether `utilisation` is set.
    pub has_utilisation: bool,
}

/// One limit's ceiling on requests per minute.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct llmgov_plan_ceiling {
    /// The limit: `"rpm"`, `"tpm"`, `"input_tpm"`, `"output_tpm"` or
    /// `"concurrency"` (static: never free it).
    pub limit: *const c_char,
    /// Requests per minute it allows at 100% utilisation; `INFINITY` for a
    /// limit on tokens the requests do not use (an `output_tpm` with
    /// `avg_output` 0).
    pub rpm: f64,
}

/// What `llmgov_plan_capacity` works out: every set limit's ceiling, the
/// one that binds, and the sustainable rate.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct llmgov_plan {
    /// The binding (lowest) limit's name, as in `ceilings` (static: never
    /// free it).
    pub binding: *const c_char,
    /// Sustainable requests per minute: the lowest ceiling × utilisation.
    pub sustainable_rpm: f64,
    /// The same while reservations hold p95 sizes (as llmgov's do until
    /// they are settled); read only when
    /// `has_sustainable_rpm_reserving_p95`.
    pub sustainable_rpm_reserving_p95: f64,
    /// Whether a p95 was given, so `sustainable_rpm_reserving_p95` is set.
    pub has_sustainable_rpm_reserving_p95: bool,
    /// Each set limit's ceiling for average-sized requests, in the order
    /// `rpm`, `tpm`, `input_tpm`, `output_tpm`, `concurrency`; the first
    /// `ceilings_len` are filled, the rest are `{NULL, 0}`.
    pub ceilings: [llmgov_plan_ceiling; LLMGOV_PLAN_LIMITS],
    /// How many of `ceilings` are filled (1 to `LLMGOV_PLAN_LIMITS`).
    pub ceilings_len: usize,
}

/// The planner's limit names as static C strings.
const LIMIT_NAMES: [&CStr; LLMGOV_PLAN_LIMITS] = [c"rpm", c"tpm", c"input_tpm", c"output_tpm", c"concurrency"];

/// The static C string of a limit the core named; a name this binding does
/// not know (a newer core) is an error, never a panic.
fn limit_name(name: &str) -> Outcome<*const c_char> {
    LIMIT_NAMES.iter().find(|c| c.to_bytes() == name.as_bytes()).map(|c| c.as_ptr()).ok_or_else(|| Failure::Binding {
        result: llmgov_result::UnknownError,
        field: "limit".to_owned(),
        value: Some(name.to_owned()),
        reason: "a limit this version of the C binding does not know".to_owned(),
    })
}

impl llmgov_plan_input {
    /// The core's input: each flagged field, the core's defaults for an
    /// unset latency or utilisation.
    fn core(&self) -> PlanInput {
        let set = |has: bool, value: f64| has.then_some(value);
        let defaults = PlanInput::default();
        PlanInput {
            rpm: set(self.has_rpm, self.rpm),
            tpm: set(self.has_tpm, self.tpm),
            input_tpm: set(self.has_input_tpm, self.input_tpm),
            output_tpm: set(self.has_output_tpm, self.output_tpm),
            concurrency: set(self.has_concurrency, self.concurrency),
            avg_input: self.avg_input,
            p95_input: set(self.has_p95_input, self.p95_input),
            avg_output: self.avg_output,
            p95_output: set(self.has_p95_output, self.p95_output),
            latency: set(self.has_latency, self.latency).unwrap_or(defaults.latency),
            utilisation: set(self.has_utilisation, self.utilisation).unwrap_or(defaults.utilisation),
        }
    }
}

/// The C form of a plan.
fn fill(plan: &Plan) -> Outcome<llmgov_plan> {
    let empty = llmgov_plan_ceiling { limit: std::ptr::null(), rpm: 0.0 };
    let mut ceilings = [empty; LLMGOV_PLAN_LIMITS];
    if plan.ceilings.len() > LLMGOV_PLAN_LIMITS {
        let count = plan.ceilings.len();
        return Err(Failure::Binding {
            result: llmgov_result::UnknownError,
            field: "ceilings".to_owned(),
            value: Some(count.to_string()),
            reason: format!("more limits than this version of the C binding holds ({LLMGOV_PLAN_LIMITS})"),
        });
    }
    for (slot, ceiling) in ceilings.iter_mut().zip(&plan.ceilings) {
        *slot = llmgov_plan_ceiling { limit: limit_name(ceiling.limit)?, rpm: ceiling.rpm };
    }
    Ok(llmgov_plan {
        binding: limit_name(plan.binding)?,
        sustainable_rpm: plan.sustainable_rpm,
        sustainable_rpm_reserving_p95: plan.sustainable_rpm_reserving_p95.unwrap_or(0.0),
        has_sustainable_rpm_reserving_p95: plan.sustainable_rpm_reserving_p95.is_some(),
        ceilings,
        ceilings_len: plan.ceilings.len(),
    })
}

/// How many requests a minute a set of limits sustains for a workload's
/// shape, and which limit binds: min(RPM, TPM ÷ tokens, ITPM ÷ input,
/// OTPM ÷ output, concurrency × 60 ÷ latency) × utilisation, as
/// `llmgov plan` prints it. Needs no governor; never blocks.
///
/// Bad input is `LLMGOV_RESULT_INVALID_REQUEST`, and `llmgov_last_error`
/// gives the field (`"rpm"`, `"utilisation"`, … as named in
/// `llmgov_plan_input`) and its value: a negative, zero (for a limit, a
/// p95, the latency or the utilisation), NaN or infinite number, a
/// utilisation above 1, or no limit at all (`e.field` =
/// `"rpm/tpm/input_tpm/output_tpm/concurrency"`, `e.value` = `"none"`). A
/// NULL pointer is `LLMGOV_RESULT_NULL_ARGUMENT` naming it.
///
/// # Ownership
/// `input` is only read, during the call. On success `*out` is filled; its
/// strings are static (never free them).
///
/// # Safety
/// `input` NULL or readable for one `llmgov_plan_input`; `out` NULL or
/// writable for one `llmgov_plan`.
#[no_mangle]
pub unsafe extern "C" fn llmgov_plan_capacity(input: *const llmgov_plan_input, out: *mut llmgov_plan) -> llmgov_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let (input, out) = unsafe { (args::reference(input, "input")?, Out::new(out, "out")?) };
        let plan = input.core().plan()?;
        out.write(fill(&plan)?);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::mem::MaybeUninit;

    use crate::errors::{llmgov_error, llmgov_last_error};

    fn seed_batch() -> llmgov_plan_input {
        // SAFETY: all-zero is a valid llmgov_plan_input (no field set).
        let mut input: llmgov_plan_input = unsafe { MaybeUninit::zeroed().assume_init() };
        (input.rpm, input.has_rpm, input.tpm, input.has_tpm) = (60.0, true, 100_000.0, true);
        (input.avg_input, input.avg_output) = (1500.0, 500.0);
        (input.utilisation, input.has_utilisation) = (1.0, true);
        input
    }

    fn plan(input: &llmgov_plan_input) -> (llmgov_result, MaybeUninit<llmgov_plan>) {
        let mut out = MaybeUninit::<llmgov_plan>::uninit();
        let result = unsafe { llmgov_plan_capacity(input, out.as_mut_ptr()) };
        (result, out)
    }

    fn text(p: *const c_char) -> String {
        unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_owned()
    }

    fn last_field_and_value() -> (String, String) {
        let mut e = MaybeUninit::<llmgov_error>::uninit();
        assert_eq!(unsafe { llmgov_last_error(e.as_mut_ptr()) }, llmgov_result::Ok);
        let e = unsafe { e.assume_init() };
        (text(e.field), text(e.value))
    }

    #[test]
    fn the_seed_batch_case_binds_on_tokens_at_50_a_minute() {
        let (result, out) = plan(&seed_batch());
        assert_eq!(result, llmgov_result::Ok);
        let plan = unsafe { out.assume_init() };
        assert_eq!(text(plan.binding), "tpm");
        assert_eq!(plan.sustainable_rpm, 50.0);
        assert!(!plan.has_sustainable_rpm_reserving_p95);
        assert_eq!(plan.ceilings_len, 2);
        let ceilings: Vec<_> = plan.ceilings[..2].iter().map(|c| (text(c.limit), c.rpm)).collect();
        assert_eq!(ceilings, [("rpm".to_owned(), 60.0), ("tpm".to_owned(), 50.0)]);
        assert!(plan.ceilings[2].limit.is_null());
    }

    #[test]
    fn unset_latency_and_utilisation_take_the_cores_defaults() {
        let mut input = seed_batch();
        input.has_utilisation = false;
        (input.concurrency, input.has_concurrency) = (10.0, true);
        let plan = unsafe { plan(&input).1.assume_init() };
        // 10 in flight for the default 5 s: 120 a minute, so tpm still binds, at 90%.
        assert_eq!(text(plan.binding), "tpm");
        assert!((plan.sustainable_rpm - 45.0).abs() < 1e-9);
        assert_eq!(plan.ceilings[2].rpm, 120.0);
    }

    #[test]
    fn a_zero_limit_is_refused_not_taken_as_unset() {
        let mut input = seed_batch();
        input.tpm = 0.0;
        assert_eq!(plan(&input).0, llmgov_result::InvalidRequest);
        assert_eq!(last_field_and_value(), ("tpm".to_owned(), "0".to_owned()));
    }

    #[test]
    fn null_pointers_are_named() {
        let mut out = MaybeUninit::<llmgov_plan>::uninit();
        let result = unsafe { llmgov_plan_capacity(std::ptr::null(), out.as_mut_ptr()) };
        assert_eq!(result, llmgov_result::NullArgument);
        let result = unsafe { llmgov_plan_capacity(&seed_batch(), std::ptr::null_mut()) };
        assert_eq!(result, llmgov_result::NullArgument);
    }

    #[test]
    fn every_core_limit_name_has_a_static_string() {
        for name in ["rpm", "tpm", "input_tpm", "output_tpm", "concurrency"] {
            assert_eq!(text(limit_name(name).unwrap()), name);
        }
        assert!(limit_name("rpd").is_err());
    }
}
