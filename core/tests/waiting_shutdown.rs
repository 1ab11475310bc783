//! A governor's waiting timer thread ends with the governor: nothing of it
//! outlives `drop` (a C program that exits right after freeing its
//! governor must not find the thread still running). Alone in its own test
//! binary, so that no other test's governor has a timer thread.

#![cfg(target_os = "linux")]

use llmgov::{Governor, Request};

/// Threads of this process now. (The timer thread names itself once it
/// runs, so its name may not show yet; its task is there from the spawn.)
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn dropping_the_governor_joins_its_timer_thread() {
    let gov = Governor::from_toml(
        r#"
        [scopes.p]
        limits = [{ dimension = "requests", amount = 1, window = "1m" }]
        "#,
    )
    .unwrap();
    let route = gov.route(&["p"]).unwrap();
    let mut held = gov.try_acquire(&Request::new(route)).unwrap();
    let before = threads();
    let waiting = gov.acquire(&Request::new(route));
    assert_eq!(gov.queue_metrics().depth, 1);
    assert_eq!(threads(), before + 1, "a waiter starts the timer thread");
    drop(waiting);
    gov.cancel(&mut held).unwrap();
    drop(gov);
    assert_eq!(threads(), before, "the timer thread was joined when the governor went");
}
