//! A route or a permit of one governor handed to another: an
//! `InvalidRequest` naming it, and nothing charged or given back on the
//! wrong scopes. Before, the shared part went by index into the other
//! governor's scopes: a panic past its end, or another scope's bucket.

mod common;

use common::{fresh_prefix, redis_url, TIMEOUT};
use llmgov::Usage;
use llmgov_redis::{Error, RedisGovernor, SharedRoute};

/// Two shared scopes, `p/a` and `p/b`, or only the second, `p/b`.
fn governor(url: &str, prefix: &str, both: bool) -> RedisGovernor {
    let first = if both { "[redis.scopes.\"p/a\"]\nmode = \"exact\"" } else { "" };
    RedisGovernor::from_toml(&format!(
        r#"
        [scopes."p/a"]
        limits = [{{ dimension = "requests", amount = 3, window = "1d" }}]
        [scopes."p/b"]
        limits = [{{ dimension = "requests", amount = 3, window = "1d" }}]
        [redis]
        url = "{url}"
        prefix = "{prefix}"
        expected_processes = 1
        timeout = "{TIMEOUT}"
        {first}
        [redis.scopes."p/b"]
        mode = "exact"
        "#
    ))
    .unwrap()
}

fn refused_field<T: std::fmt::Debug>(result: Result<T, Error>) -> &'static str {
    match result {
        Err(Error::Core(llmgov::Error::InvalidRequest { field, .. })) => field,
        other => panic!("expected InvalidRequest, got {other:?}"),
    }
}

fn admitted(gov: &RedisGovernor, route: &SharedRoute) -> u64 {
    let mut admitted = 0;
    while let Ok(mut permit) = gov.try_acquire(route, Usage::new(1, 0)) {
        gov.settle(&mut permit, Usage::new(1, 0)).unwrap();
        admitted += 1;
    }
    admitted
}

#[test]
fn another_governors_route_or_permit_is_refused_and_changes_nothing() {
    let Some(url) = redis_url("another_governors_route_or_permit") else { return };
    let prefix = fresh_prefix("foreign");
    let both = governor(&url, &prefix, true);
    let only_b = governor(&url, &prefix, false);
    let b_of_both = both.route(&["p/b"]).unwrap(); // shared scope index 1 of 2
    let a_of_both = both.route(&["p/a"]).unwrap(); // index 0: `p/b` in the other
    assert_eq!(refused_field(only_b.try_acquire(&b_of_both, Usage::new(1, 0))), "route");
    assert_eq!(refused_field(only_b.try_acquire(&a_of_both, Usage::new(1, 0))), "route");

    let mut permit = both.try_acquire(&a_of_both, Usage::new(1, 0)).unwrap(); // p/a: 2 left
    assert_eq!(refused_field(only_b.cancel(&mut permit)), "permit");
    assert_eq!(refused_field(only_b.settle(&mut permit, Usage::new(1, 0))), "permit");
    // Still pending with its owner; nothing was given back to `p/b` by the other.
    both.settle(&mut permit, Usage::new(1, 0)).unwrap();
    assert_eq!(admitted(&only_b, &only_b.route(&["p/b"]).unwrap()), 3);
    assert_eq!(admitted(&both, &a_of_both), 2);
}
