//! The circuit breaker of a shared provider scope: failures one process
//! sees open the breaker of its safe share's copy, and the opening holds
//! the scope in Redis for the pause, for every process; the answer to the
//! first request sent after the pause is the probe's.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{fresh_prefix, redis_url, TIMEOUT};
use llmgov::{LimitKind, ManualClock, Usage};
use llmgov_redis::{Error, RedisGovernor};

/// Two consecutive failures open the breaker: for 300 ms, then 30 s.
fn config(url: &str, prefix: &str, mode: &str) -> String {
    format!(
        r#"
        [adaptive.breaker]
        failures = 2
        pauses = ["300ms", "30s"]
        [scopes."openai/key"]
        provider = true
        limits = [
          {{ dimension = "requests", amount = 1000, window = "1m" }},
          {{ dimension = "tokens", amount = 1000000, window = "1m" }},
        ]
        [redis]
        url = "{url}"
        prefix = "{prefix}"
        expected_processes = 2
        timeout = "{TIMEOUT}"
        [redis.scopes."openai/key"]
        mode = "{mode}"
        "#
    )
}

const REQUEST: Usage = Usage { input_tokens: 10, cached_input_tokens: 0, output_tokens: 10 };

fn fail(gov: &RedisGovernor, permit: &mut llmgov_redis::SharedPermit) {
    let classified = gov.report(permit, 503, &[] as &[(&str, &str)], b"").unwrap();
    assert_ne!(classified.kind, LimitKind::RateLimited, "no 429: the breaker alone holds");
    gov.cancel(permit).unwrap();
}

/// The time `gov`'s next request on `route` is held for, if it is.
fn held_for(gov: &RedisGovernor, route: &llmgov_redis::SharedRoute) -> Option<Duration> {
    match gov.try_acquire(route, REQUEST) {
        Ok(mut permit) => gov.settle(&mut permit, REQUEST).map(|()| None).unwrap(),
        Err(Error::RateLimited { scope, retry_after, .. }) => {
            assert_eq!(&*scope, "openai/key");
            Some(retry_after.expect("a held scope says when"))
        }
        Err(other) => panic!("{other:?}"),
    }
}

/// How long `gov`'s requests are held for once it has spent what its lease
/// still holds (in exact mode, nothing: held at once).
fn held_after_lease(gov: &RedisGovernor, route: &llmgov_redis::SharedRoute, mode: &str) -> Duration {
    let spent = (0..64).take_while(|_| held_for(gov, route).is_none()).count();
    assert!(spent < 64, "never held");
    assert!(mode == "leased" || spent == 0, "exact mode spent {spent} past the hold");
    held_for(gov, route).expect("still held")
}

fn opens_for_every_process_and_reopens_when_the_probe_fails(mode: &str) {
    let Some(url) = redis_url(&format!("a_shared_breaker_{mode}")) else { return };
    let config = config(&url, &fresh_prefix(&format!("breaker-{mode}")), mode);
    let clocks = [(); 2].map(|_| Arc::new(ManualClock::new(0)));
    let [a, b] = clocks.clone().map(|clock| RedisGovernor::from_toml_with_clock(&config, clock).unwrap());
    let (route_a, route_b) = (a.route(&["openai/key"]).unwrap(), b.route(&["openai/key"]).unwrap());
    let mut sent: Vec<_> = (0..2).map(|_| a.try_acquire(&route_a, REQUEST).unwrap()).collect();
    fail(&a, &mut sent[0]);
    assert_eq!(held_for(&b, &route_b), None, "one failure of two holds nothing");
    fail(&a, &mut sent[1]);
    let held = held_after_lease(&b, &route_b, mode);
    assert!(held > Duration::from_millis(200) && held < Duration::from_secs(1), "the first pause: {held:?}");

    // Past the pause (in Redis's time and on a's clock), the next request
    // goes, and its failure is the probe's: open again, for the next pause.
    std::thread::sleep(held + Duration::from_millis(100));
    clocks[0].advance(Duration::from_secs(1));
    let mut probe = a.try_acquire(&route_a, REQUEST).expect("the pause is over");
    fail(&a, &mut probe);
    for (gov, route) in [(&b, &route_b), (&a, &route_a)] {
        let held = held_after_lease(gov, route, mode);
        assert!(held > Duration::from_secs(29) && held <= Duration::from_secs(31), "the second pause: {held:?}");
    }
}

#[test]
fn a_shared_breaker_opens_for_every_process_and_reopens_when_the_probe_fails_in_exact_mode() {
    opens_for_every_process_and_reopens_when_the_probe_fails("exact");
}

#[test]
fn a_shared_breaker_opens_for_every_process_and_reopens_when_the_probe_fails_in_leased_mode() {
    opens_for_every_process_and_reopens_when_the_probe_fails("leased");
}
