//! `RedisPermit`: a reservation on local and shared scopes, reconciled once
//! (settled or cancelled) on the thread pool.

use std::sync::{Arc, Mutex, TryLockError};

use llmgov::Usage;
use llmgov_redis::{Error as RedisError, FeedbackTarget, SharedPermit};
use napi::bindgen_prelude::AsyncTask;
use napi::{Env, Result, Task};
use napi_derive::napi;

use super::SharedGovernor;
use crate::errors::{reject_redis, OrThrow};
use crate::feedback::{answer, to_js, Classification};
use crate::numbers::count;

/// A granted reservation of a `RedisGovernor`. Use the package's
/// `RedisPermit`; this class is its engine.
#[napi]
pub struct NativeRedisPermit {
    gov: SharedGovernor,
    /// Locked by the one task reconciling it; a second finds it reconciled.
    permit: Arc<Mutex<SharedPermit>>,
    estimate: Usage,
    from_fallback: bool,
    /// Where the provider's answer goes (fixed when granted, so `report`
    /// never waits for a reconciling task's lock).
    feedback_target: FeedbackTarget,
}

impl NativeRedisPermit {
    pub(crate) fn new(gov: SharedGovernor, permit: SharedPermit, estimate: Usage) -> Self {
        let (from_fallback, feedback_target) = (permit.from_fallback(), permit.feedback_target());
        NativeRedisPermit { gov, permit: Arc::new(Mutex::new(permit)), estimate, from_fallback, feedback_target }
    }

    fn reconcile(&self, actual: Option<Usage>) -> AsyncTask<Reconcile> {
        AsyncTask::new(Reconcile { gov: self.gov.clone(), permit: self.permit.clone(), actual })
    }
}

/// What a permit reserved: its estimate, `maxOutputTokens` as the output.
#[napi(object)]
pub struct RedisEstimate {
    pub input_tokens: f64,
    pub cached_input_tokens: f64,
    pub output_tokens: f64,
}

#[napi]
impl NativeRedisPermit {
    /// Reconciles with the actual usage on the thread pool: refunds what was
    /// over-reserved, charges what was under, frees concurrency slots.
    #[napi(catch_unwind, ts_return_type = "Promise<void>")]
    pub fn settle(
        &self,
        env: Env,
        input_tokens: f64,
        cached_input_tokens: f64,
        output_tokens: f64,
    ) -> Result<AsyncTask<Reconcile>> {
        let actual = Usage {
            input_tokens: count("input_tokens", input_tokens).or_throw(&env)?,
            cached_input_tokens: count("cached_input_tokens", cached_input_tokens).or_throw(&env)?,
            output_tokens: count("output_tokens", output_tokens).or_throw(&env)?,
        };
        Ok(self.reconcile(Some(actual)))
    }

    /// Gives the whole reservation back, on the thread pool.
    #[napi(catch_unwind, ts_return_type = "Promise<void>")]
    pub fn cancel(&self) -> AsyncTask<Reconcile> {
        self.reconcile(None)
    }

    /// Charges `tokens` more streamed output on the route's local scopes
    /// (beyond their reservation only), at once: no Redis call.
    #[napi(catch_unwind)]
    pub fn add_output(&self, env: Env, tokens: f64) -> Result<()> {
        let tokens = count("tokens", tokens).or_throw(&env)?;
        // Only a task reconciling the permit locks it: it is then settled
        // or cancelled, and waiting for that task would block the loop.
        let mut permit = match self.permit.try_lock() {
            Ok(permit) => permit,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return Err(reject_redis(&env, RedisError::AlreadyReconciled)),
        };
        self.gov.get().add_output(&mut permit, tokens).map_err(|e| reject_redis(&env, e))
    }

    /// Feeds the provider's answer to this permit's request into the
    /// route's local scopes (a 429 holds the local provider scope it names
    /// empty until the retry-after, AIMD and the breaker learn) and returns
    /// how it was read. A 429, or a breaker it opens, also holds the route's
    /// shared provider scopes in Redis, for every process: that call runs on
    /// the thread pool, so `report` never blocks the event loop.
    #[napi(catch_unwind)]
    pub fn report(&self, env: Env, status: f64, headers: Vec<String>, body: String) -> Result<Classification> {
        let (status, pairs) = answer(status, &headers).or_throw(&env)?;
        let gov = self.gov.get();
        let classification = gov
            .report_local(&self.feedback_target, status, &pairs, body.as_bytes())
            .map_err(|e| reject_redis(&env, e))?;
        if gov.holds_in_redis(&self.feedback_target, &classification) {
            // Never fails: a Redis error counts in the governor's health.
            let target = self.feedback_target.clone();
            env.spawn(HoldProviders { gov: self.gov.clone(), target, classification: classification.clone() })?;
        }
        Ok(to_js(&classification))
    }

    /// What it reserved.
    #[napi(getter)]
    pub fn estimate(&self) -> RedisEstimate {
        RedisEstimate {
            input_tokens: self.estimate.input_tokens as f64,
            cached_input_tokens: self.estimate.cached_input_tokens as f64,
            output_tokens: self.estimate.output_tokens as f64,
        }
    }

    /// Whether the shared scopes admitted it from the safe local share
    /// because Redis was unreachable.
    #[napi(getter)]
    pub fn from_fallback(&self) -> bool {
        self.from_fallback
    }
}

/// `settle` (`Some`) or `cancel` (`None`) on the thread pool.
pub struct Reconcile {
    gov: SharedGovernor,
    permit: Arc<Mutex<SharedPermit>>,
    actual: Option<Usage>,
}

impl Task for Reconcile {
    type Output = llmgov_redis::Result<()>;
    type JsValue = ();

    fn compute(&mut self) -> Result<Self::Output> {
        // A panic elsewhere cannot leave a permit half reconciled: the
        // governor marks it before any I/O, so the poisoned lock is still usable.
        let mut permit = self.permit.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let gov = self.gov.get();
        Ok(match self.actual {
            Some(usage) => gov.settle(&mut permit, usage),
            None => gov.cancel(&mut permit),
        })
    }

    fn resolve(&mut self, env: Env, output: Self::Output) -> Result<()> {
        output.map_err(|e| reject_redis(&env, e))
    }
}

/// What a 429 holds on a permit's shared provider scopes, on the thread pool.
pub struct HoldProviders {
    gov: SharedGovernor,
    target: FeedbackTarget,
    classification: llmgov::Classification,
}

impl Task for HoldProviders {
    type Output = ();
    type JsValue = ();

    fn compute(&mut self) -> Result<()> {
        self.gov.get().hold_providers(&self.target, &self.classification);
        Ok(())
    }

    fn resolve(&mut self, _env: Env, _output: ()) -> Result<()> {
        Ok(())
    }
}
