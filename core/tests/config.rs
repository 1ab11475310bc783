//! Bad configs can't be built: every error names the field and the value.

use llmgov::{Config, Error, Governor};

fn invalid(toml: &str) -> (String, String, String) {
    match Config::from_toml(toml).and_then(|c| c.validate().map(|()| c)) {
        Err(Error::InvalidConfig { field, value, reason }) => (field, value, reason),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

fn scope_p(limit: &str) -> String {
    format!("[scopes.\"p\"]\nlimits = [{limit}]\n")
}

fn scope(limit: &str) -> String {
    format!("[scopes.\"openai/gpt-4o\"]\nlimits = [{limit}]\n")
}

#[test]
fn unknown_key_is_named() {
    let (field, value, reason) = invalid(&scope(r#"{ dimension = "tokens", amount = 5, window = "1m", refil = 3 }"#));
    assert_eq!(field, "scopes.openai/gpt-4o.limits[0].refil");
    assert_eq!(value, "refil");
    assert!(reason.contains("unknown field"), "{reason}");
}

#[test]
fn zero_amount_is_named() {
    let (field, value, _) = invalid(&scope(r#"{ dimension = "tokens", amount = 0, window = "1m" }"#));
    assert_eq!((field.as_str(), value.as_str()), ("scopes.openai/gpt-4o.limits[0].amount", "0"));
}

#[test]
fn negative_amount_is_named() {
    let (field, value, _) = invalid(&scope(r#"{ dimension = "tokens", amount = -5, window = "1m" }"#));
    assert_eq!((field.as_str(), value.as_str()), ("scopes.openai/gpt-4o.limits[0].amount", "-5"));
}

#[test]
fn unknown_dimension_is_named() {
    let (field, value, reason) = invalid(&scope(r#"{ dimension = "tokenz", amount = 5, window = "1m" }"#));
    assert_eq!((field.as_str(), value.as_str()), ("scopes.openai/gpt-4o.limits[0].dimension", "tokenz"));
    assert!(reason.contains("input_tokens"), "lists the known dimensions: {reason}");
}

#[test]
fn malformed_duration_is_named() {
    let (field, value, _) = invalid(&scope(r#"{ dimension = "tokens", amount = 5, window = "5 parsecs" }"#));
    assert_eq!((field.as_str(), value.as_str()), ("scopes.openai/gpt-4o.limits[0].window", "5 parsecs"));
    let (field, value, _) = invalid("permit_ttl = \"0s\"\n");
    assert_eq!((field.as_str(), value.as_str()), ("permit_ttl", "0s"));
}

#[test]
fn rule_mismatches_are_named() {
    let cases = [
        (r#"{ dimension = "tokens", amount = 5 }"#, "scopes.openai/gpt-4o.limits[0].window"),
        (r#"{ dimension = "concurrency", amount = 5, window = "1m" }"#, "scopes.openai/gpt-4o.limits[0].window"),
        (
            r#"{ dimension = "tokens", amount = 5, window = "1m", algorithm = "sliding_window", burst = 9 }"#,
            "scopes.openai/gpt-4o.limits[0].burst",
        ),
        (r#"{ dimension = "tokens", amount = 5, window = "1m", slots = 9 }"#, "scopes.openai/gpt-4o.limits[0].slots"),
        (
            r#"{ dimension = "tokens", amount = 5, window = "10ms", algorithm = "sliding_window", slots = 60 }"#,
            "scopes.openai/gpt-4o.limits[0].slots",
        ),
        (
            r#"{ dimension = "requests", amount = 5, window = "1m", count_cached_input = false }"#,
            "scopes.openai/gpt-4o.limits[0].count_cached_input",
        ),
    ];
    for (limit, expected) in cases {
        assert_eq!(invalid(&scope(limit)).0, expected, "{limit}");
    }
}

#[test]
fn margins_and_paths_are_checked() {
    assert_eq!(invalid("safety_margin = 1.5\n").0, "safety_margin");
    let tiny = "safety_margin = 0.1\n".to_owned() + &scope(r#"{ dimension = "requests", amount = 5, window = "1m" }"#);
    assert_eq!(invalid(&tiny).0, "scopes.openai/gpt-4o.limits[0].amount");
    let (field, value, _) =
        invalid("[scopes.\"tenants/a*\"]\nlimits = [{ dimension = \"requests\", amount = 1, window = \"1s\" }]\n");
    assert_eq!((field.as_str(), value.as_str()), ("scopes.tenants/a*", "tenants/a*"));
    assert_eq!(
        invalid("[scopes.\"a//b\"]\nlimits = [{ dimension = \"requests\", amount = 1, window = \"1s\" }]\n").1,
        "a//b"
    );
}

#[test]
fn json_and_toml_load_the_same_config() {
    let toml =
        Config::from_toml(&scope(r#"{ dimension = "tokens", amount = 30000, window = "1m", burst = 5000 }"#)).unwrap();
    let json = Config::from_json(
        r#"{"scopes": {"openai/gpt-4o": {"limits": [{"dimension": "tokens", "amount": 30000, "window": "1m", "burst": 5000}]}}}"#,
    )
    .unwrap();
    assert_eq!(toml, json);
    assert!(Config::from_json(r#"{"scopes": {}} trailing"#).is_err());
}

#[test]
fn a_config_that_is_not_an_object_is_refused() {
    // Serde fills a struct from an array by position: this set `scopes`.
    let by_position = r#"[null, null, {"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1m"}]}}]"#;
    for (config, field) in [
        (Config::from_json(by_position), "<json>"),
        (Config::from_json("[1]"), "<json>"),
        (Config::from_value(serde_json::json!([1])), "<config>"),
        (Config::from_value(serde_json::json!("scopes")), "<config>"),
    ] {
        match config {
            Err(Error::InvalidConfig { field: f, reason, .. }) => {
                assert_eq!(f, field);
                assert!(reason.contains("object of sections"), "{reason}");
            }
            other => panic!("expected a config error, got {other:?}"),
        }
    }
}

#[test]
fn malformed_toml_says_where() {
    match Config::from_toml("[scopes.\"x\"\nlimits = 3") {
        Err(Error::InvalidConfig { field, .. }) => assert_eq!(field, "<toml>"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn request_paths_are_checked() {
    let gov = Governor::from_preset("openai-gpt-4o-tier1").unwrap();
    assert_eq!(gov.route(&["openai//gpt-4o"]).unwrap_err().code(), "invalid_path");
    assert_eq!(gov.route(&["tenants/*"]).unwrap_err().code(), "invalid_path");
    // A NUL would cut the path short in C; no control character is a name.
    let nul = gov.route(&["openai/org\0/gpt-4o"]).unwrap_err();
    assert_eq!(nul.code(), "invalid_path");
    assert!(nul.to_string().contains(r"openai/org\0/gpt-4o") && !nul.to_string().contains('\0'), "{nul}");
    assert_eq!(gov.route(&["anthropic/claude"]).unwrap_err().code(), "unknown_scope");
    let mixed = Governor::from_preset("volcengine-deepseek-v3").unwrap();
    let before = mixed.ledger().scope_count();
    assert_eq!(mixed.route(&["volcengine/deepseek-v3/keys/k1", "nope/x"]).unwrap_err().code(), "unknown_scope");
    assert_eq!(mixed.ledger().scope_count(), before, "a refused route leaves no template scope behind");
    let empty: [&str; 0] = [];
    assert_eq!(gov.route(&empty).unwrap_err().code(), "invalid_request");
}

#[test]
fn quoted_number_names_its_value() {
    let (field, value, reason) = invalid(&scope_p(r#"{ dimension = "tokens", amount = "5000", window = "1m" }"#));
    assert_eq!(field, "scopes.p.limits[0].amount");
    assert_eq!(value, "5000", "reason was: {reason}");
}

#[test]
fn sub_ms_window_is_blamed_not_slots() {
    let (field, value, _) =
        invalid(&scope_p(r#"{ dimension = "tokens", amount = 5, window = "500us", algorithm = "sliding_window" }"#));
    assert_eq!((field.as_str(), value.as_str()), ("scopes.p.limits[0].window", "500us"));
}

#[test]
fn concurrency_algorithm_value_is_as_written() {
    let (field, value, _) =
        invalid(&scope_p(r#"{ dimension = "concurrency", amount = 5, algorithm = "sliding_window" }"#));
    assert_eq!((field.as_str(), value.as_str()), ("scopes.p.limits[0].algorithm", "sliding_window"));
}

#[test]
fn missing_field_is_named() {
    let (field, value, _) = invalid(&scope_p(r#"{ amount = 5, window = "1m" }"#));
    assert_eq!(field, "scopes.p.limits[0].dimension", "value was {value:?}");
}

#[test]
fn window_beyond_400_days_is_refused() {
    invalid(&scope_p(r#"{ dimension = "requests", amount = 1, window = "600y" }"#));
}

/// The configuration example in the README loads and validates.
#[test]
fn readme_config_example_is_valid() {
    let readme = include_str!("../../README.md");
    let section = &readme[readme.find("## Configuration").expect("the README has a configuration section")..];
    let start = section.find("```toml\n").expect("with a TOML example") + "```toml\n".len();
    let example = &section[start..start + section[start..].find("```").unwrap()];
    let config = Config::from_toml(example).unwrap_or_else(|e| panic!("README example: {e}"));
    config.validate().unwrap();
    assert!(config.scopes.contains_key("tenants/*"));
}

#[test]
fn control_characters_in_scope_paths_are_refused() {
    // A request can never name such a path (it is refused as not printable),
    // so the scope could only sit unused in logs and labels.
    for path in ["tenants/a\nb", "a\tb", "nul\0"] {
        let config =
            serde_json::json!({"scopes": {path: {"limits": [{"dimension": "requests", "amount": 1, "window": "1m"}]}}});
        match Config::from_value(config).and_then(|c| c.validate()) {
            Err(Error::InvalidConfig { field, value, reason }) => {
                assert_eq!((field, value.as_str()), (format!("scopes.{path}"), path));
                assert!(reason.contains("control character"), "{reason}");
            }
            other => panic!("{path:?}: expected InvalidConfig, got {other:?}"),
        }
    }
}

#[test]
fn json_keys_given_twice_are_refused() {
    // TOML refuses a key given twice; JSON parsers keep the last silently,
    // which dropped the first scope's limits without a word.
    let limit = r#"{"limits": [{"dimension": "requests", "amount": 1, "window": "1m"}]}"#;
    let cases = [
        (format!(r#"{{"scopes": {{"a": {limit}, "a": {limit}}}}}"#), "scopes", "a"),
        (
            format!(
                r#"{{"scopes": {{"a": {limit}}}, "pricing": {{"m": {{"input": 1, "output": 1}}, "m": {{"input": 2, "output": 2}}}}}}"#
            ),
            "pricing",
            "m",
        ),
        (
            format!(
                r#"{{"scopes": {{"a": {limit}}}, "profiles": {{"p": {{"deployments": ["a"]}}, "p": {{"deployments": ["a"]}}}}}}"#
            ),
            "profiles",
            "p",
        ),
        (
            format!(
                r#"{{"scopes": {{"a": {limit}}}, "profiles": {{"p": {{"deployments": ["a"], "fallback_allowed": {{"batch": true, "batch": false}}}}}}}}"#
            ),
            "profiles.p.fallback_allowed",
            "batch",
        ),
    ];
    for (json, field, key) in cases {
        match Config::from_json(&json) {
            Err(Error::InvalidConfig { field: f, value, reason }) => {
                assert_eq!((f.as_str(), value.as_str()), (field, key), "{reason}");
                assert!(reason.contains("more than once"), "{reason}");
            }
            other => panic!("{json}: expected InvalidConfig, got {other:?}"),
        }
    }
    assert!(Config::from_json(&format!(r#"{{"scopes": {{"a": {limit}, "b": {limit}}}}}"#)).is_ok());
}

#[test]
fn a_discovered_limit_checks_count_cached_input_too() {
    // As a configured limit does: only input and total tokens count cached input.
    let toml = "[scopes.\"p\"]\nprovider = true\n\
        limits = [{ dimension = \"output_tokens\", window = \"1m\", count_cached_input = false }]\n";
    let (field, value, reason) = invalid(toml);
    assert_eq!((field.as_str(), value.as_str()), ("scopes.p.limits[0].count_cached_input", "false"));
    assert!(reason.contains("input_tokens"), "{reason}");
}

#[test]
fn nan_or_inf_safety_margin_is_refused_naming_the_field() {
    // serde_json turned TOML's nan and inf into null, which an optional
    // field reads as left out: this loaded as the default margin of 1.
    for bad in ["nan", "inf", "-inf"] {
        let text =
            format!("safety_margin = {bad}\n") + &scope_p(r#"{ dimension = "requests", amount = 10, window = "1m" }"#);
        let (field, value, reason) = invalid(&text);
        assert_eq!((field.as_str(), value.as_str()), ("safety_margin", bad), "{reason}");
    }
    // As 0.7, the default decrease.
    assert_eq!(invalid("[adaptive]\ndecrease = nan\n").0, "adaptive.decrease");
}

#[test]
fn nan_amount_on_a_provider_scope_is_refused() {
    // Not a discovered limit, as an amount left out is.
    let toml =
        "[scopes.\"p\"]\nprovider = true\nlimits = [{ dimension = \"tokens\", amount = inf, window = \"1m\" }]\n";
    let (field, value, _) = invalid(toml);
    assert_eq!((field.as_str(), value.as_str()), ("scopes.p.limits[0].amount", "inf"));
}

#[test]
fn nan_quantile_error_names_the_value() {
    // A required float used to be refused as `invalid type: null`, with no value.
    let (field, value, reason) = invalid("[output]\nquantile = nan\n");
    assert_eq!((field.as_str(), value.as_str()), ("output.quantile", "nan"), "{reason}");
    assert!(reason.contains("finite"), "{reason}");
}

#[test]
fn default_max_tokens_above_max_tokens_is_refused_at_load() {
    // Accepted, it refused every request without max_tokens on an `expected`
    // limit, naming `expected_output_tokens`, which the caller never set.
    let toml = "[output]\ndefault_max_tokens = 2000000000000\n".to_owned()
        + &scope_p(r#"{ dimension = "tokens", amount = 5000, window = "1m", reserve_output = "expected" }"#);
    let (field, value, _) = invalid(&toml);
    assert_eq!((field.as_str(), value.as_str()), ("output.default_max_tokens", "2000000000000"));
    let at_most = format!("[output]\ndefault_max_tokens = {}\n", llmgov::MAX_TOKENS);
    Config::from_toml(&at_most).unwrap().validate().unwrap();
}
