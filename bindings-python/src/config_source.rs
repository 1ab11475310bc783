//! Where a governor's config and clock come from, as Python gives them:
//! TOML text or a file, a dict, and the clock's name. `Governor` and
//! `RedisGovernor` are built the same way.

use std::sync::Arc;
use std::time::Duration;

use llmgov::{Clock, ManualClock, MonotonicClock};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::args::{self, type_name};
use crate::errors;

/// TOML text, or the contents of the file a `pathlib.Path` or a path string
/// names (text with a newline or an `=` is taken as the config itself).
pub fn toml_text(py: Python<'_>, source: &Bound<'_, PyAny>) -> PyResult<String> {
    let os = py.import("os")?;
    let path = if source.is_instance(&os.getattr("PathLike")?)? {
        os.call_method1("fspath", (source,))?.extract::<String>()?
    } else {
        match source.extract::<String>() {
            Ok(text) if text.contains('\n') || text.contains('=') || text.trim().is_empty() => return Ok(text),
            Ok(path) => path,
            Err(_) => {
                let reason = format!("must be TOML text or a path, not {}", type_name(source));
                return Err(errors::config(py, "source", &type_name(source), reason));
            }
        }
    };
    std::fs::read_to_string(&path).map_err(|e| errors::config(py, "path", &path, format!("cannot be read: {e}")))
}

/// A config dict as the JSON value it stands for.
pub fn dict_value(py: Python<'_>, config: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    if !config.is_instance_of::<PyDict>() {
        let reason = format!("must be a dict, not {}", type_name(config));
        return Err(errors::config(py, "config", &type_name(config), reason));
    }
    crate::convert::python_to_value(config)
        .map_err(|reason| errors::config(py, "config", "<dict>", format!("contains {reason}")))
}

/// The clock a governor is built with, from its name.
pub struct ChosenClock {
    pub clock: Arc<dyn Clock>,
    /// Set for `"manual"`: the handle [`advance`] moves.
    pub manual: Option<Arc<ManualClock>>,
}

/// `"monotonic"` (the real clock) or `"manual"` (starts at 0, moves only
/// with `advance`).
pub fn clock(py: Python<'_>, name: &str) -> PyResult<ChosenClock> {
    match name {
        "manual" => {
            let manual = Arc::new(ManualClock::new(0));
            Ok(ChosenClock { clock: manual.clone(), manual: Some(manual) })
        }
        "monotonic" => Ok(ChosenClock { clock: Arc::new(MonotonicClock::new()), manual: None }),
        other => Err(errors::config(py, "clock", other, "must be \"monotonic\" or \"manual\"".to_owned())),
    }
}

/// Moves a manual clock forward by `ms` milliseconds; a governor on the
/// real clock refuses.
pub fn advance(py: Python<'_>, manual: Option<&ManualClock>, ms: &Bound<'_, PyAny>) -> PyResult<()> {
    let ms = args::millis("ms", ms)?;
    let Some(clock) = manual else {
        let reason = "advance() needs a governor built with clock=\"manual\"".to_owned();
        return Err(errors::invalid_text(py, "clock", "monotonic", reason));
    };
    clock.advance(Duration::from_nanos((ms * 1e6).round() as u64));
    Ok(())
}
