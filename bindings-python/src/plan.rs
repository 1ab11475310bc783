//! `llmgov.plan_capacity(...)`: the core's capacity planner (what `llmgov
//! plan` prints), with keyword arguments named as the command's flags.

use llmgov::plan::{Plan, PlanInput};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::args::{self, type_name};
use crate::errors::{invalid, IntoPyResult};

/// A number argument (int or float, not bool); `None` when absent or None.
fn number(field: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<f64>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    match args::number(value) {
        Some(n) => Ok(Some(n)),
        None => Err(invalid(field, value, format!("must be a number, not {}", type_name(value)))),
    }
}

/// The plan as a dict: `ceilings` (each `limit` with the `rpm` it allows
/// at 100%), `binding`, `sustainable_rpm`, `sustainable_rpm_reserving_p95`.
fn plan_dict<'py>(py: Python<'py>, plan: &Plan) -> PyResult<Bound<'py, PyDict>> {
    let ceilings = PyList::empty(py);
    for ceiling in &plan.ceilings {
        let row = PyDict::new(py);
        row.set_item("limit", ceiling.limit)?;
        // A limit on tokens that requests do not use allows any rate: inf.
        row.set_item("rpm", ceiling.rpm)?;
        ceilings.append(row)?;
    }
    let dict = PyDict::new(py);
    dict.set_item("ceilings", ceilings)?;
    dict.set_item("binding", plan.binding)?;
    dict.set_item("sustainable_rpm", plan.sustainable_rpm)?;
    dict.set_item("sustainable_rpm_reserving_p95", plan.sustainable_rpm_reserving_p95)?;
    Ok(dict)
}

/// How many requests a minute a set of limits sustains for a workload's
/// shape, and which limit binds (as `llmgov plan`). Give at least one limit
/// (`rpm`, `tpm`, `input_tpm`, `output_tpm`, `concurrency`); `avg_input` and
/// `avg_output` are tokens per request, `p95_*` what reservations hold,
/// `latency` seconds, `utilisation` the fraction of the limits to plan for.
/// Bad input raises `InvalidRequest` naming the argument: a wrong value, a
/// missing `avg_input` or `avg_output`, or an unknown keyword.
#[pyfunction]
#[pyo3(signature = (*, avg_input = None, avg_output = None, rpm = None, tpm = None, input_tpm = None, output_tpm = None,
    concurrency = None, p95_input = None, p95_output = None, latency = None, utilisation = None, **extra),
    text_signature = "(*, avg_input, avg_output, rpm=None, tpm=None, input_tpm=None, output_tpm=None, \
        concurrency=None, p95_input=None, p95_output=None, latency=None, utilisation=None)")]
#[allow(clippy::too_many_arguments)]
pub fn plan_capacity<'py>(
    py: Python<'py>,
    avg_input: Option<&Bound<'py, PyAny>>,
    avg_output: Option<&Bound<'py, PyAny>>,
    rpm: Option<&Bound<'py, PyAny>>,
    tpm: Option<&Bound<'py, PyAny>>,
    input_tpm: Option<&Bound<'py, PyAny>>,
    output_tpm: Option<&Bound<'py, PyAny>>,
    concurrency: Option<&Bound<'py, PyAny>>,
    p95_input: Option<&Bound<'py, PyAny>>,
    p95_output: Option<&Bound<'py, PyAny>>,
    latency: Option<&Bound<'py, PyAny>>,
    utilisation: Option<&Bound<'py, PyAny>>,
    extra: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    args::no_unknown("plan_capacity", extra)?;
    let required = |field: &str, value: Option<&Bound<'py, PyAny>>| {
        number(field, value)?.ok_or_else(|| {
            let reason = "is required: tokens per request".to_owned();
            crate::errors::invalid_text(py, field, "None", reason)
        })
    };
    let defaults = PlanInput::default();
    let input = PlanInput {
        rpm: number("rpm", rpm)?,
        tpm: number("tpm", tpm)?,
        input_tpm: number("input_tpm", input_tpm)?,
        output_tpm: number("output_tpm", output_tpm)?,
        concurrency: number("concurrency", concurrency)?,
        avg_input: required("avg_input", avg_input)?,
        p95_input: number("p95_input", p95_input)?,
        avg_output: required("avg_output", avg_output)?,
        p95_output: number("p95_output", p95_output)?,
        latency: number("latency", latency)?.unwrap_or(defaults.latency),
        utilisation: number("utilisation", utilisation)?.unwrap_or(defaults.utilisation),
    };
    let plan = input.plan().py_err()?;
    plan_dict(py, &plan)
}
