//! Where a governor's config and clock come from, as Python gives them:
//! TOML text or a file, a dict, and the clock's name. `Governor` and
//! `RedisGovernor` are built the same way.

use std::sync::Arc;
use std::time::Duration;

use llmgov::{Clock, ManualClock, MonotonicClock};
use pyo3::prelude::*;
use pyo3::types::{PyMapping, PyString};

use crate::args::{self, type_name};
use crate::errors;

/// TOML text, or the contents of the file a `pathlib.Path` or a path string
/// names (text with a newline or an `=` is taken as the config itself).
pub fn toml_text(py: Python<'_>, source: &Bound<'_, PyAny>) -> PyResult<String> {
    let os = py.import("os")?;
    let path = if source.is_instance(&os.getattr("PathLike")?)? {
        text(py, "path", &os.call_method1("fspath", (source,))?)?
    } else if source.is_instance_of::<PyString>() {
        match text(py, "source", source)? {
            text if text.contains('\n') || text.contains('=') || text.trim().is_empty() => return Ok(text),
            path => path,
        }
    } else {
        let reason = format!("must be TOML text or a path, not {}", type_name(source));
        return Err(errors::config(py, "source", &type_name(source), reason));
    };
    std::fs::read_to_string(&path).map_err(|e| errors::config(py, "path", &path, format!("cannot be read: {e}")))
}

/// A config dict (or other mapping) as the JSON value it stands for.
pub fn dict_value(py: Python<'_>, config: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    if config.cast::<PyMapping>().is_err() {
        let reason = format!("must be a dict (or other Mapping), not {}", type_name(config));
        return Err(errors::config(py, "config", &type_name(config), reason));
    }
    crate::convert::python_to_value(config).map_err(|e| {
        let field = if e.path.is_empty() { "config".to_owned() } else { e.path };
        errors::config(py, &field, &e.value, e.reason)
    })
}

/// The clock a governor is built with, from its name.
pub struct ChosenClock {
    pub clock: Arc<dyn Clock>,
    /// Set for `"manual"`: the handle [`advance`] moves.
    pub manual: Option<Arc<ManualClock>>,
}

/// A str argument of a config source (`from_json`'s text, a preset's
/// name), or a `ConfigError` naming `field`.
pub fn text(py: Python<'_>, field: &str, value: &Bound<'_, PyAny>) -> PyResult<String> {
    args::text(value).map_err(|reason| {
        let shown = value.repr().map(|r| r.to_string()).unwrap_or_else(|_| type_name(value));
        errors::config(py, field, &shown, reason)
    })
}

/// `"monotonic"` (the real clock, also when `clock` is not given) or
/// `"manual"` (starts at 0, moves only with `advance`).
pub fn clock(py: Python<'_>, name: Option<&Bound<'_, PyAny>>) -> PyResult<ChosenClock> {
    let name = match name.filter(|n| !n.is_none()) {
        Some(name) => text(py, "clock", name)?,
        None => "monotonic".to_owned(),
    };
    match name.as_str() {
        "manual" => {
            let manual = Arc::new(ManualClock::new(0));
            Ok(ChosenClock { clock: manual.clone(), manual: Some(manual) })
        }
        "monotonic" => Ok(ChosenClock { clock: Arc::new(MonotonicClock::new()), manual: None }),
        other => Err(errors::config(py, "clock", other, "must be \"monotonic\" or \"manual\"".to_owned())),
    }
}

/// How far a manual clock may go: 2^63 ns (about 292 years), so that
/// deadlines and windows added to its reading stay far from overflowing.
const MANUAL_CLOCK_END_NS: u64 = 1 << 63;

/// Moves a manual clock forward by `ms` milliseconds; a governor on the
/// real clock refuses, and so does a step past [`MANUAL_CLOCK_END_NS`].
pub fn advance(py: Python<'_>, manual: Option<&ManualClock>, ms: &Bound<'_, PyAny>) -> PyResult<()> {
    let step = args::millis("ms", ms)?;
    let Some(clock) = manual else {
        let reason = "advance() needs a governor built with clock=\"manual\"".to_owned();
        return Err(errors::invalid_text(py, "clock", "monotonic", reason));
    };
    let ns = (step * 1e6).round();
    let now = clock.now();
    if ns > (MANUAL_CLOCK_END_NS - now.min(MANUAL_CLOCK_END_NS)) as f64 {
        let reason = format!("would move the clock (now {} ms) past 2^63 ns, about 292 years", now / 1_000_000);
        return Err(errors::invalid("ms", ms, reason));
    }
    clock.advance(Duration::from_nanos(ns as u64));
    Ok(())
}
