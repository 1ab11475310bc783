//! Routing by model profile: `gov.profile(name, paths)` resolves a profile
//! and its fallback chain for a consumer once (a `Profile`), and
//! `gov.try_acquire_profile(profile, ...)` admits on the deployment with the
//! most headroom, failing over and falling back as the config allows.
//! `gov.acquire_profile(...)` (awaited) and `gov.acquire_profile_blocking(...)`
//! wait, when no deployment admits now, in the queue of the one that should
//! pass first among those the request's class may use.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use llmgov::{Acquire, Governor, ProfileRoute, ProfileStep, ProfileWait, Request, Routed};
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::args::type_name;
use crate::errors::{invalid, IntoPyResult};
use crate::governor::PyGovernor;
use crate::permit::PyPermit;
use crate::request::{path_list, RequestArgs};
use crate::waiting;
use crate::wake::{self, Waiting};

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
        Some(paths) => path_list(paths, "a path or a list of paths")?,
        None => Vec::new(),
    };
    let key = PyTuple::new(py, [name.clone().into_any(), PyTuple::new(py, &consumer)?.into_any()])?;
    let cache = gov.get().profiles.bind(py);
    if let Some(found) = cache.get_item(&key)? {
        return Ok(found.cast_into::<PyProfile>()?.unbind());
    }
    let name = crate::args::text(name).map_err(|reason| invalid("profile", name, reason))?;
    let route = gov.get().gov.profile(&name, &consumer).py_err()?;
    let resolved = Py::new(py, PyProfile { route, name, paths: consumer })?;
    cache.set_item(key, resolved.clone_ref(py))?;
    Ok(resolved)
}

/// Admits a request through `profile`: a `Permit` that says which profile
/// and deployment took it, or the mapped refusal.
pub fn try_acquire(gov: &Bound<'_, PyGovernor>, profile: &PyProfile, args: &RequestArgs<'_, '_>) -> PyResult<PyPermit> {
    let this = gov.get();
    let request = args.request(gov.py(), &this.gov, profile.route.primary())?;
    let routed = this.gov.try_acquire_profile(&profile.route, &request).py_err()?;
    Ok(PyPermit::routed(routed, gov.clone().unbind()))
}

/// The waiting arguments a request by profile adds to `try_acquire_profile`'s.
pub struct WaitArgs<'a, 'py> {
    pub priority: Option<&'a Bound<'py, PyAny>>,
    pub deadline_ms: Option<&'a Bound<'py, PyAny>>,
}

/// The request `args` and `wait` describe, on `profile`'s primary route.
fn waiting_request(
    gov: &Bound<'_, PyGovernor>,
    profile: &PyProfile,
    args: &RequestArgs<'_, '_>,
    wait: &WaitArgs<'_, '_>,
) -> PyResult<Request> {
    let request = args.request(gov.py(), &gov.get().gov, profile.route.primary())?;
    waiting::with_waiting(request, wait.priority, wait.deadline_ms)
}

/// `await gov.acquire_profile(...)`: an awaitable resolved on the loop's
/// thread to a routed `Permit` or the mapped refusal.
pub fn acquire_async<'py>(
    gov: &Bound<'py, PyGovernor>,
    profile: &PyProfile,
    args: &RequestArgs<'_, 'py>,
    wait: &WaitArgs<'_, 'py>,
) -> PyResult<Bound<'py, wake::Acquiring>> {
    let request = waiting_request(gov, profile, args, wait)?;
    wake::wait_async(gov, |core| Waiting::Profile(ProfileAcquire::start(core, &profile.route, &request)))
}

/// `gov.acquire_profile_blocking(...)`: parks the thread, the GIL released
/// (and Ctrl-C let in, see `waiting::block_on`), for at most `timeout`,
/// until a routed `Permit` or a refusal.
pub fn acquire_blocking(
    gov: &Bound<'_, PyGovernor>,
    profile: &PyProfile,
    args: &RequestArgs<'_, '_>,
    wait: &WaitArgs<'_, '_>,
    timeout: Option<Duration>,
) -> PyResult<PyPermit> {
    let request = waiting::within(waiting_request(gov, profile, args, wait)?, timeout);
    let waiting = ProfileAcquire::start(&gov.get().gov, &profile.route, &request);
    let routed = waiting::block_on(gov.py(), waiting)?.py_err()?;
    Ok(PyPermit::routed(routed, gov.clone().unbind()))
}

/// A request by profile waiting for admission, for the event loop's driver
/// (`wake.rs`) to poll: the first step is taken at once (admitted, refused,
/// or queued on a deployment, so the caller is in the queue before it
/// awaits); once the deployment admits it, `Governor::admit_waited` checks
/// the profile's budget thresholds again, on the polling thread.
pub struct ProfileAcquire {
    gov: Governor,
    state: Step,
}

enum Step {
    Done(Option<llmgov::Result<Routed>>),
    Queued(Option<ProfileWait>, Acquire),
}

impl ProfileAcquire {
    /// Routes `request` through `profile`, queuing it where it must wait.
    pub fn start(gov: &Governor, profile: &ProfileRoute, request: &Request) -> Self {
        let state = match gov.step_profile(profile, request) {
            Ok(ProfileStep::Admitted(routed)) => Step::Done(Some(Ok(routed))),
            Ok(ProfileStep::Wait(wait)) => {
                let acquire = gov.acquire(&wait.request);
                Step::Queued(Some(wait), acquire)
            }
            Err(error) => Step::Done(Some(Err(error))),
        };
        ProfileAcquire { gov: gov.clone(), state }
    }

    /// Whether it is still in its deployment's queue, unanswered.
    pub fn is_waiting(&self) -> bool {
        matches!(&self.state, Step::Queued(Some(_), acquire) if acquire.is_waiting())
    }
}

impl Future for ProfileAcquire {
    type Output = llmgov::Result<Routed>;

    /// # Panics
    /// If polled again after it returned `Ready`.
    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.state {
            Step::Done(outcome) => Poll::Ready(outcome.take().expect("ProfileAcquire polled after it completed")),
            Step::Queued(wait, acquire) => {
                let admitted = ready!(Pin::new(acquire).poll(context));
                let wait = wait.take().expect("ProfileAcquire polled after it completed");
                Poll::Ready(admitted.and_then(|permit| this.gov.admit_waited(wait, permit)))
            }
        }
    }
}
