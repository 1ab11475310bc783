use super::*;

const SECOND: u64 = 1_000_000_000;

fn provider(toml: &str) -> Provider {
    let config: ProviderConfig = crate::error::parse_toml(toml).unwrap();
    Provider::new(config, 7, SystemTime::UNIX_EPOCH).unwrap()
}

fn request(key: &str, input: u64, max_tokens: u64, desired: u64) -> ProviderRequest {
    ProviderRequest {
        key: key.into(),
        input_tokens: input,
        prompt_chars: input * 4,
        max_tokens,
        desired_output_tokens: desired,
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

#[test]
fn openai_charges_the_larger_of_max_tokens_and_the_prompt_estimate_for_good() {
    let mut p = provider(
        r#"shape = "openai"
limits = [{ dimension = "tokens", amount = 1000, window = "1m" }]"#,
    );
    // 300 prompt tokens (1200 chars), max_tokens 500: charged 500.
    let a = p.admit(0, &request("k", 300, 500, 100)).unwrap();
    assert_eq!(header(&a.headers, "x-ratelimit-remaining-tokens"), Some("500"));
    p.finish(0, &a);
    assert_eq!(p.limit_states(0, "k")[0].remaining, 500, "nothing given back");
    // A long prompt outweighs max_tokens.
    p.admit(0, &request("k", 450, 10, 10)).unwrap();
    assert_eq!(p.limit_states(0, "k")[0].remaining, 50);
}

#[test]
fn anthropic_adjusts_output_to_actual_at_the_end() {
    let mut p = provider(
        r#"shape = "anthropic"
limits = [
  { dimension = "input_tokens", amount = 1000, window = "1m" },
  { dimension = "output_tokens", amount = 1000, window = "1m" },
]"#,
    );
    let a = p.admit(0, &request("k", 100, 800, 50)).unwrap();
    assert_eq!(header(&a.headers, "anthropic-ratelimit-output-tokens-remaining"), Some("200"));
    let (usage, headers) = p.finish(0, &a);
    assert_eq!(usage, ProviderUsage { input_tokens: 100, output_tokens: 50 });
    assert_eq!(header(&headers, "anthropic-ratelimit-output-tokens-remaining"), Some("950"));
    assert_eq!(header(&headers, "anthropic-ratelimit-input-tokens-remaining"), Some("900"));
}

#[test]
fn actual_charging_admits_while_capacity_remains_then_charges_usage() {
    let mut p = provider(
        r#"shape = "openai"
charging = "actual"
limits = [{ dimension = "tokens", amount = 100, window = "1m" }]"#,
    );
    let a = p.admit(0, &request("k", 80, 500, 300)).unwrap();
    p.finish(0, &a);
    assert_eq!(p.limit_states(0, "k")[0].remaining, 0, "in debt");
    let refused = p.admit(0, &request("k", 1, 1, 1)).unwrap_err();
    assert_eq!(refused.status, 429);
    assert!(refused.retry_after_ns.unwrap() > 60 * SECOND, "the debt of 280 takes minutes to repay");
}

#[test]
fn rate_limit_refusal_carries_headers_and_body() {
    let mut p = provider(
        r#"shape = "openai"
limits = [{ dimension = "requests", amount = 2, window = "1m" }]"#,
    );
    p.admit(0, &request("k", 1, 1, 1)).unwrap();
    p.admit(0, &request("k", 1, 1, 1)).unwrap();
    let r = p.admit(0, &request("k", 1, 1, 1)).unwrap_err();
    assert_eq!((r.status, r.kind), (429, RejectionKind::RateLimited(Some(ProviderDimension::Requests))));
    assert_eq!(header(&r.headers, "retry-after-ms"), Some("30000"));
    assert_eq!(header(&r.headers, "retry-after"), Some("30"));
    assert_eq!(header(&r.headers, "x-ratelimit-reset-requests"), Some("1m0s"));
    assert!(r.body.contains("rate_limit_exceeded") && r.body.contains("\"type\":\"requests\""));
}

#[test]
fn shared_pool_spans_keys_and_per_key_pools_do_not() {
    let toml = |pool: &str| {
        format!("shape = \"openai\"\npool = \"{pool}\"\nlimits = [{{ dimension = \"requests\", amount = 1, window = \"1m\" }}]")
    };
    let mut shared = provider(&toml("shared"));
    shared.admit(0, &request("a", 1, 1, 1)).unwrap();
    assert!(shared.admit(0, &request("b", 1, 1, 1)).is_err());
    let mut per_key = provider(&toml("per_key"));
    per_key.admit(0, &request("a", 1, 1, 1)).unwrap();
    assert!(per_key.admit(0, &request("b", 1, 1, 1)).is_ok());
}

#[test]
fn concurrency_and_sub_minute_windows_are_enforced() {
    let mut p = provider(
        r#"shape = "openai"
concurrency = 1
limits = [{ dimension = "requests", amount = 600, window = "1m", enforce_every = "1s" }]"#,
    );
    let a = p.admit(0, &request("k", 1, 1, 1)).unwrap();
    assert_eq!(p.admit(0, &request("k", 1, 1, 1)).unwrap_err().kind, RejectionKind::Concurrency);
    p.finish(0, &a);
    // 600 a minute held as 10 a second: the per-minute headroom does not help.
    for _ in 0..9 {
        let a = p.admit(0, &request("k", 1, 1, 1)).unwrap();
        p.finish(0, &a);
    }
    let r = p.admit(0, &request("k", 1, 1, 1)).unwrap_err();
    assert_eq!(r.kind, RejectionKind::RateLimited(Some(ProviderDimension::Requests)));
    assert_eq!(r.retry_after_ns, Some(SECOND / 10));
}

#[test]
fn the_provider_tightens_mid_run() {
    let mut p = provider(
        r#"shape = "openai"
limits = [{ dimension = "requests", amount = 100, window = "1m" }]
chaos = { tighten_at = "10m", tighten_factor = 0.5 }"#,
    );
    assert_eq!(p.limit_states(0, "k")[0].limit, 100);
    p.admit(600 * SECOND, &request("k", 1, 1, 1)).unwrap();
    assert_eq!(p.limit_states(600 * SECOND, "k")[0].limit, 50);
}

#[test]
fn chaos_is_deterministic_for_a_seed_and_quota_exhaustion_is_billing() {
    let toml = r#"shape = "anthropic"
chaos = { error_429 = 0.2, error_500 = 0.1, error_529 = 0.1 }"#;
    let outcomes = || {
        let mut p = provider(toml);
        (0..200).map(|_| p.admit(0, &request("k", 1, 1, 1)).err().map(|r| r.status)).collect::<Vec<_>>()
    };
    let first = outcomes();
    assert_eq!(first, outcomes());
    let errors = first.iter().filter(|o| o.is_some()).count();
    assert!((50..110).contains(&errors), "{errors} errors of 200 at 40%");
    assert!(first.contains(&Some(529)));
    let mut broke = provider("shape = \"openai\"\nchaos = { quota_exhausted = true }");
    let r = broke.admit(0, &request("k", 1, 1, 1)).unwrap_err();
    assert_eq!((r.status, r.kind), (429, RejectionKind::QuotaExhausted));
    assert!(r.body.contains("insufficient_quota") && r.retry_after_ns.is_none());
}

#[test]
fn output_respects_max_tokens_and_latency_follows_it() {
    let mut p = provider(
        r#"shape = "openai"
latency = { ttft_ms = 200, ms_per_output_token = 10 }"#,
    );
    let a = p.admit(0, &request("k", 10, 50, 400)).unwrap();
    assert_eq!(a.output_tokens, 50);
    assert_eq!(a.ttft_ns, 200_000_000);
    assert_eq!(a.duration_ns, (200 + 49 * 10) * 1_000_000);
}

#[test]
fn bad_provider_configs_name_the_field() {
    let config: ProviderConfig = crate::error::parse_toml(
        "shape = \"openai\"\nlimits = [{ dimension = \"tokens\", amount = 10, window = \"1m\", enforce_every = \"2m\" }]",
    )
    .unwrap();
    let err = Provider::new(config, 0, SystemTime::UNIX_EPOCH).unwrap_err().to_string();
    assert!(err.contains("provider.limits[0].enforce_every") && err.contains("2m"), "{err}");
    let err = crate::error::parse_toml::<ProviderConfig>("shape = \"openia\"").unwrap_err().to_string();
    assert!(err.contains("shape") && err.contains("openia"), "{err}");
}

#[test]
fn retry_after_is_the_longest_wait_over_every_short_limit() {
    let mut p = provider(
        r#"shape = "openai"
limits = [
  { dimension = "requests", amount = 2, window = "1m" },
  { dimension = "tokens", amount = 1000, window = "1m" },
]"#,
    );
    p.admit(0, &request("k", 500, 500, 1)).unwrap();
    p.admit(0, &request("k", 500, 500, 1)).unwrap();
    // Requests come back in 30 s, but 1000 tokens only in 60 s.
    let r = p.admit(0, &request("k", 1000, 1000, 1)).unwrap_err();
    assert_eq!(r.kind, RejectionKind::RateLimited(Some(ProviderDimension::Tokens)));
    assert_eq!(r.retry_after_ns, Some(60 * SECOND));
    assert!(r.body.contains("\"type\":\"tokens\"") && r.body.contains("for tokens"), "{}", r.body);
    assert!(p.admit(60 * SECOND, &request("k", 1000, 1000, 1)).is_ok(), "it fits once the wait is over");
}

#[test]
fn a_huge_max_tokens_is_too_large_not_an_overflow() {
    let mut p = provider(
        r#"shape = "anthropic"
limits = [{ dimension = "tokens", amount = 1000, window = "1m" }]"#,
    );
    // Prompt plus max_tokens passes u64::MAX: it must not wrap to a free request.
    let r = p.admit(0, &request("k", 10, u64::MAX, 1)).unwrap_err();
    assert_eq!(r.kind, RejectionKind::TooLarge(ProviderDimension::Tokens));
}

#[test]
fn a_pool_that_starts_exhausted_is_exhausted_when_first_used() {
    let toml = |pool: &str| {
        format!(
            "shape = \"openai\"\npool = \"{pool}\"\nchaos = {{ start_exhausted = true }}\n\
             limits = [{{ dimension = \"requests\", amount = 2, window = \"1m\" }}]"
        )
    };
    let mut shared = provider(&toml("shared"));
    let r = shared.admit(60 * SECOND, &request("a", 1, 1, 1)).unwrap_err();
    assert_eq!(r.retry_after_ns, Some(30 * SECOND), "one request refills in 30 s from first use");
    let mut per_key = provider(&toml("per_key"));
    per_key.admit(0, &request("a", 1, 1, 1)).unwrap_err();
    assert!(per_key.admit(120 * SECOND, &request("b", 1, 1, 1)).is_err(), "b's pool is new at 120 s");
    assert!(per_key.admit(150 * SECOND, &request("b", 1, 1, 1)).is_ok());
}

#[test]
fn a_concurrency_refusal_reads_as_concurrency_to_the_classifier() {
    for shape in ["openai", "anthropic"] {
        let mut p = provider(&format!("shape = \"{shape}\"\nconcurrency = 1"));
        p.admit(0, &request("k", 1, 1, 1)).unwrap();
        let r = p.admit(0, &request("k", 1, 1, 1)).unwrap_err();
        assert_eq!(r.kind, RejectionKind::Concurrency);
        let c = llmgov::classify_response(r.status, &r.headers, r.body.as_bytes(), llmgov::ProviderHint::Auto, 0);
        assert_eq!(c.kind, llmgov::LimitKind::RateLimited, "{shape}: {}", r.body);
        assert_eq!(c.dimension, llmgov::LimitDimension::Concurrency, "{shape}: {}", r.body);
    }
}
