//! Waiting on a `RedisGovernor`. Redis holds no queue of waiters: a refused
//! request sleeps until the refusing limit could admit it and tries again,
//! paced by the backend's sans-IO [`Wait`]. Each try is one task on the
//! thread pool; the JavaScript layer sleeps between tries on a timer, which
//! an `AbortSignal` cuts short with nothing held.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use llmgov::Usage;
use llmgov_redis::{SharedPermit, SharedRoute, Wait};
use napi::bindgen_prelude::{AsyncTask, Either};
use napi::{Env, Result, Task};
use napi_derive::napi;

use super::{NativeRedisPermit, SharedGovernor};
use crate::errors::reject_redis;

/// One waiting acquire: its route, its estimate and the pacing of its tries.
#[napi]
pub struct NativeRedisAttempt {
    gov: SharedGovernor,
    route: SharedRoute,
    estimate: Usage,
    wait: Arc<Mutex<Wait>>,
}

impl NativeRedisAttempt {
    /// An attempt starting now on the governor's clock, giving up after `limit`.
    pub(crate) fn new(gov: SharedGovernor, route: SharedRoute, estimate: Usage, limit: Option<Duration>) -> Self {
        let wait = Wait::new(gov.get().local().clock().now(), limit);
        NativeRedisAttempt { gov, route, estimate, wait: Arc::new(Mutex::new(wait)) }
    }
}

#[napi]
impl NativeRedisAttempt {
    /// Tries once on the thread pool: a Promise of the permit, or of the
    /// milliseconds to sleep before the next try; rejected with the refusal
    /// that ends the wait (`DeadlineExceededError`, `NeverFitsError`, …).
    #[napi(catch_unwind, ts_return_type = "Promise<NativeRedisPermit | number>")]
    pub fn step(&self) -> AsyncTask<Step> {
        AsyncTask::new(Step {
            gov: self.gov.clone(),
            route: self.route.clone(),
            estimate: self.estimate,
            wait: self.wait.clone(),
        })
    }
}

/// One try of a waiting acquire.
pub struct Step {
    gov: SharedGovernor,
    route: SharedRoute,
    estimate: Usage,
    wait: Arc<Mutex<Wait>>,
}

impl Task for Step {
    type Output = llmgov_redis::Result<Either<SharedPermit, Duration>>;
    type JsValue = Either<NativeRedisPermit, f64>;

    fn compute(&mut self) -> Result<Self::Output> {
        let gov = self.gov.get();
        Ok(match gov.try_acquire(&self.route, self.estimate) {
            Ok(permit) => Ok(Either::A(permit)),
            Err(refusal) => {
                let mut wait = self.wait.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                wait.after(refusal, gov.local().clock().now()).map(Either::B)
            }
        })
    }

    fn resolve(&mut self, env: Env, output: Self::Output) -> Result<Self::JsValue> {
        match output.map_err(|e| reject_redis(&env, e))? {
            Either::A(permit) => Ok(Either::A(NativeRedisPermit::new(self.gov.clone(), permit, self.estimate))),
            Either::B(pause) => Ok(Either::B(pause.as_secs_f64() * 1000.0)),
        }
    }
}
