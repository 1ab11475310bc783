//! The `[redis]` section's bad values: each an `InvalidConfig` naming the
//! field and the value as written. (No Redis needed: nothing connects.)

use llmgov_redis::{Error, RedisGovernor};

fn refused(redis: &str) -> (String, String, String) {
    let text = format!(
        r#"
        [scopes."p/s"]
        limits = [{{ dimension = "requests", amount = 10, window = "1m" }}]
        [redis]
        {redis}
        "#
    );
    match RedisGovernor::from_toml(&text) {
        Err(Error::InvalidConfig { field, value, reason }) => (field, value, reason),
        Err(other) => panic!("expected InvalidConfig for {redis:?}, got {other}"),
        Ok(_) => panic!("accepted {redis:?}"),
    }
}

const BASE: &str = "url = \"redis://127.0.0.1:1\"\nprefix = \"p\"\nexpected_processes = 2";

/// A year-long TTL overflowed the nanosecond arithmetic (a lease's deadline
/// wrapped); a 1 ms one made the keeper call Redis in a tight loop.
#[test]
fn durations_out_of_range_name_the_field_and_value() {
    for (field, text, says) in [
        ("lease_ttl", "1000years", "at most 1day"),
        ("slot_ttl", "2days", "at most 1day"),
        ("timeout", "100000000000years", "at most 1day"),
        ("retry_interval", "1year", "at most 1day"),
        ("slot_ttl", "1ms", "at least 100ms"),
        ("lease_ttl", "99ms", "at least 100ms"),
        ("timeout", "0s", "at least 1ms"),
        ("timeout", "soon", "not a duration"),
    ] {
        let (named, value, reason) = refused(&format!("{BASE}\n{field} = \"{text}\""));
        assert_eq!((named.as_str(), value.as_str()), (format!("redis.{field}").as_str(), text));
        assert!(reason.contains(says), "{field} = {text}: {reason}");
    }
    // The bounds themselves are taken.
    let text = format!(
        "[scopes.\"p/s\"]\nlimits = [{{ dimension = \"requests\", amount = 1, window = \"1m\" }}]\n[redis]\n{BASE}\nslot_ttl = \"100ms\"\nlease_ttl = \"1day\"\ntimeout = \"1ms\""
    );
    RedisGovernor::from_toml(&text).unwrap();
}

/// Serde's errors named the field with an empty value.
#[test]
fn values_of_the_wrong_type_or_unknown_name_the_field_and_value() {
    let cases = [
        ("url = 5\nprefix = \"p\"\nexpected_processes = 2", "redis.url", "5"),
        ("url = \"redis://h\"\nprefix = \"p\"\nexpected_processes = -1", "redis.expected_processes", "-1"),
        ("url = \"redis://h\"\nprefix = \"p\"\nexpected_processes = \"8\"", "redis.expected_processes", "8"),
        ("url = \"redis://h\"\nexpected_processes = 2", "redis.prefix", ""),
        (&format!("{BASE}\ntimeot = \"1s\""), "redis.timeot", "timeot"),
        (&format!("{BASE}\n[redis.scopes.\"p/s\"]\nmode = \"fast\""), "redis.scopes.p/s.mode", "fast"),
    ];
    for (redis, field, value) in cases {
        let (named, shown, reason) = refused(redis);
        assert_eq!((named.as_str(), shown.as_str()), (field, value), "{reason}");
    }
}

/// The TOML is read as the core reads it: a syntax error names the text at
/// fault, and a `nan` (which JSON cannot hold, and which became "left out")
/// is refused naming its path and the value.
#[test]
fn toml_errors_name_the_text_as_the_core_does() {
    let field_and_value = |text: &str| match RedisGovernor::from_toml(text) {
        Err(Error::Core(llmgov::Error::InvalidConfig { field, value, .. })) => (field.to_string(), value),
        other => panic!("expected the core's InvalidConfig, got {:?}", other.map(|_| ())),
    };
    let nan = format!("safety_margin = nan\n[scopes.\"p/s\"]\nlimits = []\n[redis]\n{BASE}");
    assert_eq!(field_and_value(&nan), ("safety_margin".into(), "nan".into()));
    let (field, value) = field_and_value("[redis]\nexpected_processes = @");
    assert_eq!(field, "<toml>");
    assert_eq!(value, "@", "the text at fault");
}

/// A Cluster is reached over TCP, has only database 0, and `cluster` is a
/// boolean: each named with the value as written.
#[test]
fn cluster_settings_name_the_field_and_value() {
    let cases = [
        ("url = \"unix:///run/redis.sock\"\ncluster = true", "redis.url", "unix:///run/redis.sock", "over TCP"),
        ("url = \"redis://127.0.0.1:1/3\"\ncluster = true", "redis.url", "redis://127.0.0.1:1/3", "database"),
        ("url = \"redis://127.0.0.1:1\"\ncluster = \"yes\"", "redis.cluster", "yes", "boolean"),
    ];
    for (redis, field, value, says) in cases {
        let (named, shown, reason) = refused(&format!("{redis}\nprefix = \"p\"\nexpected_processes = 2"));
        assert_eq!((named.as_str(), shown.as_str()), (field, value), "{reason}");
        assert!(reason.contains(says), "{redis}: {reason}");
    }
}

/// Behind Sentinel, `url` names the master over TCP, the Sentinels are
/// `redis://` or `rediss://` servers, and a Cluster is not also behind Sentinel: each
/// named with the value as written (a password shown as `***`).
#[test]
fn sentinel_settings_name_the_field_and_value() {
    let sentinels = "sentinels = [\"redis://127.0.0.1:26379\"]";
    let cases = [
        (
            format!("url = \"redis://m\"\ncluster = true\n{sentinels}"),
            "redis.sentinels",
            "redis://127.0.0.1:26379",
            "not both",
        ),
        (
            format!("url = \"unix:///run/redis.sock\"\n{sentinels}"),
            "redis.url",
            "unix:///run/redis.sock",
            "master name",
        ),
        (
            "url = \"redis://m\"\nsentinels = [\"redis://s:1\", \"http://:pw@s:2\"]".into(),
            "redis.sentinels[1]",
            "http://***@s:2",
            "redis[s]://",
        ),
        (
            "url = \"redis://m\"\nsentinels = [\"redis://s:port\"]".into(),
            "redis.sentinels[0]",
            "redis://s:port",
            "not a Sentinel address",
        ),
        ("url = \"redis://m\"\nsentinels = \"redis://s:1\"".into(), "redis.sentinels", "redis://s:1", "sequence"),
    ];
    for (redis, field, value, says) in cases {
        let (named, shown, reason) = refused(&format!("{redis}\nprefix = \"p\"\nexpected_processes = 2"));
        assert_eq!((named.as_str(), shown.as_str()), (field, value), "{reason}");
        assert!(reason.contains(says), "{redis}: {reason}");
    }
}
