//! Waiting for shared scopes. Redis holds no queue of waiters: a refused
//! request sleeps until the refusing limit could admit it (Redis's GCRA
//! says when, to the microsecond, in exact mode and on a lease renewal in
//! leased mode) and tries again, until its timeout. A refusal that names no
//! time (a concurrency slot, a lease another thread took first) is polled, the pauses doubling up to [`MAX_POLL`] with jitter so
//! that the waiters of many processes do not call Redis in step.
//!
//! [`Wait`] decides the pauses and does no I/O, so the blocking loop here
//! and the Python binding's asyncio loop share it.

use std::time::Duration;

use crate::errors::{Error, Result};
use crate::governor::{RedisGovernor, SharedPermit, SharedRoute};
use llmgov::Usage;

/// The first pause after a refusal that names no time.
pub const FIRST_POLL: Duration = Duration::from_millis(2);
/// The longest pause between two tries of a refusal that names no time: a
/// slot freed by another process is seen within this.
pub const MAX_POLL: Duration = Duration::from_millis(50);
/// The shortest pause: a predicted wait of zero (the limit refills as the
/// answer travels) must not turn into a busy loop of Redis calls.
const MIN_PAUSE: Duration = Duration::from_micros(100);

/// The pauses of one waiting acquire, on the governor's clock (nanoseconds).
#[derive(Debug, Clone)]
pub struct Wait {
    started: u64,
    deadline: Option<u64>,
    next_poll: Duration,
}

impl Wait {
    /// A wait starting at `now` that gives up after `timeout` (`None`: never).
    pub fn new(now: u64, timeout: Option<Duration>) -> Self {
        let deadline = timeout.map(|t| now.saturating_add(u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)));
        Wait { started: now, deadline, next_poll: FIRST_POLL }
    }

    /// How long to sleep after `refusal` at `now` before trying again; or
    /// the error to give the caller: `refusal` itself when waiting cannot
    /// help (the request never fits, a bad argument), and
    /// [`Error::DeadlineExceeded`] when the limit's predicted time is past
    /// the deadline (at once, as the local queue refuses) or the deadline
    /// has come.
    pub fn after(&mut self, refusal: Error, now: u64) -> Result<Duration> {
        let predicted = match refusal {
            Error::RateLimited { retry_after, .. } => retry_after,
            Error::Core(llmgov::Error::CircuitOpen { retry_after, .. }) => Some(retry_after),
            other => return Err(other),
        };
        let left = self.deadline.map(|deadline| Duration::from_nanos(deadline.saturating_sub(now)));
        let waited = Duration::from_nanos(now.saturating_sub(self.started));
        let pause = match predicted {
            Some(predicted) if left.is_some_and(|left| predicted > left) => {
                return Err(Error::DeadlineExceeded { waited, retry_after: Some(predicted) });
            }
            Some(predicted) => predicted.max(MIN_PAUSE),
            None => self.poll(),
        };
        match left {
            Some(left) if left.is_zero() => Err(Error::DeadlineExceeded { waited, retry_after: predicted }),
            // A poll past the deadline tries once more at the deadline.
            Some(left) => Ok(pause.min(left)),
            None => Ok(pause),
        }
    }

    /// The next poll's pause: between half and all of a doubling step.
    fn poll(&mut self) -> Duration {
        let step = self.next_poll;
        self.next_poll = (step * 2).min(MAX_POLL);
        step / 2 + step.mul_f64(rand::random::<f64>() / 2.0)
    }
}

impl RedisGovernor {
    /// [`RedisGovernor::try_acquire`], waiting while a limit refuses: the
    /// thread sleeps until the refusing limit could admit the request and
    /// tries again (see [`Wait`]), for at most `timeout` on the governor's
    /// clock (`None`: until admitted). A request that can never fit is
    /// refused at once, as is one whose predicted wait is past the timeout
    /// ([`Error::DeadlineExceeded`], with the prediction as `retry_after`).
    ///
    /// Waiters are not queued across processes: whichever tries first after
    /// capacity returns takes it. The pauses are real time; on a
    /// [`llmgov::ManualClock`] the timeout moves only as the clock does.
    pub fn acquire_blocking(
        &self,
        route: &SharedRoute,
        estimate: Usage,
        timeout: Option<Duration>,
    ) -> Result<SharedPermit> {
        let clock = self.local().clock();
        let mut wait = Wait::new(clock.now(), timeout);
        loop {
            match self.try_acquire(route, estimate) {
                Ok(permit) => return Ok(permit),
                Err(refusal) => std::thread::sleep(wait.after(refusal, clock.now())?),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmgov::Dimension;

    const MS: u64 = 1_000_000;

    fn limited(retry_after: Option<Duration>) -> Error {
        Error::RateLimited { scope: "openai".into(), dimension: Dimension::Requests, retry_after }
    }

    /// The refusal of a provider scope whose breaker opened for `pause_s`.
    fn open_breaker(pause_s: u64) -> llmgov::Error {
        let config = llmgov::Config::from_value(serde_json::json!({
            "adaptive": {"breaker": {"failures": 1, "pauses": [format!("{pause_s}s")]}},
            "scopes": {"openai": {"provider": true, "limits": [{"dimension": "requests", "amount": 9, "window": "1m"}]}}
        }))
        .unwrap();
        let ledger = llmgov::Ledger::new(&config).unwrap();
        let route = ledger.route(&["openai"]).unwrap();
        let failure = llmgov::classify_response(503, &[("x", "y")], b"", llmgov::ProviderHint::Auto, 0);
        ledger.observe(route, &failure, 0).unwrap();
        ledger.try_acquire(&llmgov::Request::new(route), 0).unwrap_err()
    }

    #[test]
    fn a_predicted_wait_is_slept_whole_and_one_past_the_deadline_is_refused_at_once() {
        let mut wait = Wait::new(0, Some(Duration::from_millis(100)));
        assert_eq!(wait.after(limited(Some(Duration::from_millis(30))), 10 * MS), Ok(Duration::from_millis(30)));
        let refused = wait.after(limited(Some(Duration::from_millis(91))), 10 * MS);
        let expected =
            Error::DeadlineExceeded { waited: Duration::from_millis(10), retry_after: Some(Duration::from_millis(91)) };
        assert_eq!(refused, Err(expected));
    }

    #[test]
    fn a_wait_of_zero_still_pauses() {
        let mut wait = Wait::new(0, None);
        assert_eq!(wait.after(limited(Some(Duration::ZERO)), 0), Ok(MIN_PAUSE));
    }

    #[test]
    fn polls_double_with_jitter_up_to_the_cap_and_stop_at_the_deadline() {
        let mut wait = Wait::new(0, Some(Duration::from_secs(1)));
        let mut step = FIRST_POLL;
        for _ in 0..8 {
            let pause = wait.after(limited(None), 0).unwrap();
            assert!(pause >= step / 2 && pause <= step, "{pause:?} for a step of {step:?}");
            step = (step * 2).min(MAX_POLL);
        }
        assert_eq!(step, MAX_POLL);
        // The last poll comes at the deadline, then the wait gives up.
        assert_eq!(wait.after(limited(None), 999 * MS), Ok(Duration::from_millis(1)));
        let expected = Error::DeadlineExceeded { waited: Duration::from_secs(1), retry_after: None };
        assert_eq!(wait.after(limited(None), 1000 * MS), Err(expected));
    }

    #[test]
    fn an_open_breaker_is_waited_for_and_what_waiting_cannot_mend_is_returned() {
        let mut wait = Wait::new(0, None);
        assert_eq!(wait.after(Error::Core(open_breaker(30)), 0), Ok(Duration::from_secs(30)));
        let never = Error::NeverFits { scope: "openai".into(), dimension: Dimension::Tokens, cost: 9, burst: 8 };
        assert_eq!(wait.after(never.clone(), 0), Err(never));
        assert_eq!(wait.after(Error::AlreadyReconciled, 0), Err(Error::AlreadyReconciled));
    }

    #[test]
    fn no_timeout_waits_as_long_as_predicted() {
        let mut wait = Wait::new(0, None);
        let hour = Duration::from_secs(3600);
        assert_eq!(wait.after(limited(Some(hour)), u64::MAX / 2), Ok(hour));
        // A timeout past the end of the clock's range never comes.
        let mut wait = Wait::new(5, Some(Duration::MAX));
        assert_eq!(wait.after(limited(Some(hour)), 5), Ok(hour));
    }
}
