//! Routing by model profile: `gov.profile(name, paths)` resolves a profile
//! and its fallback chain for a consumer once (a `Profile`), and
//! `gov.try_acquire_profile(profile, ...)` admits on the deployment with the
//! most headroom, failing over and falling back as the config allows.

use llmgov::ProfileRoute;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::args::type_name;
use crate::errors::{invalid, IntoPyResult};
use crate::governor::{path_list, PyGovernor, RequestArgs};
use crate::permit::PyPermit;

/// A model profile and its fallback chain resolved for a consumer's paths,
/// from `Governor.profile(name, paths)`. Pass it to `try_acquire_profile`
/// to skip resolving again.
#[pyclass(name = "Profile", module = "llmgov._llmgov", frozen)]
pub struct PyProfile {
    route: ProfileRoute,
    name: String,
    paths: Vec<String>,
}

#[pymethods]
impl PyProfile {
    /// The profile's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The consumer's paths every deployment's route charges too.
    #[getter]
    fn paths(&self) -> Vec<String> {
        self.paths.clone()
    }

    fn __repr__(&self) -> String {
        format!("Profile({:?}, paths={:?})", self.name, self.paths)
    }
}

/// The profile `profile` names for the consumer `paths`: a `Profile`, or a
/// name resolved (and cached) here.
pub fn resolve(
    gov: &Bound<'_, PyGovernor>,
    profile: &Bound<'_, PyAny>,
    paths: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyProfile>> {
    let py = gov.py();
    if let Ok(resolved) = profile.cast::<PyProfile>() {
        if paths.is_some_and(|p| !p.is_none()) {
            let reason = "a resolved Profile already has its paths; pass the profile's name to give others";
            return Err(invalid("paths", paths.expect("given"), reason));
        }
        return Ok(resolved.clone().unbind());
    }
    let Ok(name) = profile.cast::<PyString>() else {
        let reason = format!("must be a profile name or a Profile, not {}", type_name(profile));
        return Err(invalid("profile", profile, reason));
    };
    let consumer = match paths.filter(|p| !p.is_none()) {
        Some(paths) => path_list(paths)?,
        None => Vec::new(),
    };
    let key = PyTuple::new(py, [name.clone().into_any(), PyTuple::new(py, &consumer)?.into_any()])?;
    let cache = gov.get().profiles.bind(py);
    if let Some(found) = cache.get_item(&key)? {
        return Ok(found.cast_into::<PyProfile>()?.unbind());
    }
    let name = name.to_cow()?.into_owned();
    let route = gov.get().gov.profile(&name, &consumer).py_err()?;
    let resolved = Py::new(py, PyProfile { route, name, paths: consumer })?;
    cache.set_item(key, resolved.clone_ref(py))?;
    Ok(resolved)
}

/// Admits a request through `profile`: a `Permit` that says which profile
/// and deployment took it, or the mapped refusal.
pub fn try_acquire(gov: &Bound<'_, PyGovernor>, profile: &PyProfile, args: &RequestArgs<'_, '_>) -> PyResult<PyPermit> {
    let this = gov.get();
    let request = this.request(gov.py(), profile.route.primary(), args)?;
    let routed = this.gov.try_acquire_profile(&profile.route, &request).py_err()?;
    Ok(PyPermit::routed(routed, gov.clone().unbind()))
}
