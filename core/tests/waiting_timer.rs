//! The waiting layer's timer thread ends with the governor: when the last
//! handle is dropped, the timer has returned, and nothing it held is left.
//! A C program that exits right after `llmgov_governor_free` relies on it
//! (valgrind reported memory still being freed on the timer thread).
//!
//! The real clock, so that the timer thread itself admits the waiters; only
//! what is left after each drop is asserted, never a timing.

use std::sync::Arc;

use llmgov::{Clock, Config, Governor, MonotonicClock, Request};

#[test]
fn nothing_of_the_timer_thread_outlives_the_governor() {
    let config = Config::from_toml(
        r#"
        [scopes."p"]
        limits = [{ dimension = "requests", amount = 1000, window = "1s" }]
    "#,
    )
    .unwrap();
    for round in 0..300 {
        let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());
        let gov = Governor::with_clock(&config, clock.clone()).unwrap();
        let request = Request::new(gov.route(&["p"]).unwrap());
        // Empty the bucket: the next request waits about a millisecond, and
        // the timer thread admits it at the refill.
        while gov.try_acquire(&request).is_ok() {}
        let waiter = {
            let gov = gov.clone();
            std::thread::spawn(move || gov.acquire_blocking(&request, None))
        };
        waiter.join().unwrap().unwrap();
        // The timer may still be polling: the last handle goes now, here.
        drop(gov);
        // The timer thread holds a clone of the clock until it returns.
        assert_eq!(Arc::strong_count(&clock), 1, "round {round}: the timer thread outlived the governor");
    }
}
