"""The Python API as a user calls it: construction, admission, settling from
SDK usage objects, reporting, context managers, counting, and bad input
getting the named exception (never a bare RuntimeError or TypeError)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

import llmgov

CONFIG = """
[scopes."openai/org/gpt-4o"]
provider = true
limits = [
  { dimension = "requests", amount = 600, window = "1m" },
  { dimension = "tokens", amount = 6000, window = "1m" },
  { dimension = "concurrency", amount = 4 },
]
[scopes."tenants/*"]
limits = [{ dimension = "tokens", amount = 3000, window = "1m" }]
"""
ROUTE = ["tenants/acme", "openai/org/gpt-4o"]


@pytest.fixture
def gov() -> llmgov.Governor:
    return llmgov.Governor.from_toml(CONFIG, clock="manual")


def limit(gov: llmgov.Governor, path: str, dimension: str) -> Any:
    scope = next(s for s in gov.snapshot()["scopes"] if s["path"] == path)
    return next(lim for lim in scope["limits"] if lim["dimension"] == dimension)


def test_construction_from_file_dict_json_and_preset(tmp_path: Path) -> None:
    file = tmp_path / "limits.toml"
    file.write_text(CONFIG)
    for gov in (
        llmgov.Governor.from_toml(file),
        llmgov.Governor.from_toml(str(file)),
        llmgov.Governor.from_dict({"scopes": {"a": {"limits": [{"dimension": "requests", "amount": 1, "window": "1s"}]}}}),
        llmgov.Governor.from_json('{"scopes": {"a": {"limits": [{"dimension": "requests", "amount": 1, "window": "1s"}]}}}'),
        llmgov.Governor.from_preset("openai-gpt-4o-tier1"),
    ):
        assert gov.snapshot()["scopes"]


def test_refusal_carries_scope_dimension_and_retry_after(gov: llmgov.Governor) -> None:
    permit = gov.try_acquire(ROUTE, input_tokens=2500)
    with pytest.raises(llmgov.RateLimited) as refused:
        gov.try_acquire(ROUTE, input_tokens=1000)
    e = refused.value
    assert (e.code, e.scope, e.dimension, e.gateway_decision) == ("rate_limited", "tenants/acme", "tokens", "rejected_locally")
    assert e.retry_after_ms == 10_000 and e.retry_after == 10.0
    gov.advance(e.retry_after_ms)
    gov.try_acquire(ROUTE, input_tokens=1000).cancel()
    permit.settle(input_tokens=2500, output_tokens=0)
    with pytest.raises(llmgov.NeverFits) as never:
        gov.try_acquire(ROUTE, input_tokens=5000)
    assert (never.value.scope, never.value.cost, never.value.burst) == ("tenants/acme", 5000, 3000)


def test_routes_are_cached_and_reusable(gov: llmgov.Governor) -> None:
    route = gov.route(ROUTE)
    assert route.paths == ROUTE and gov.route(tuple(ROUTE)).index == route.index
    assert gov.route(ROUTE) is route and gov.route(route) is route
    gov.try_acquire(route, input_tokens=10).settle()
    assert limit(gov, "tenants/acme", "tokens")["in_use"] == 10


def test_settle_from_sdk_usage_objects(gov: llmgov.Governor) -> None:
    from anthropic.types import Usage as AnthropicUsage
    from openai.types import CompletionUsage

    openai_usage = CompletionUsage(
        prompt_tokens=100, completion_tokens=20, total_tokens=120, prompt_tokens_details={"cached_tokens": 40}
    )
    gov.try_acquire(ROUTE, input_tokens=100, max_output_tokens=500).settle(openai_usage)
    assert limit(gov, "tenants/acme", "tokens")["in_use"] == 120

    anthropic_usage = AnthropicUsage(input_tokens=50, output_tokens=10, cache_read_input_tokens=30, cache_creation_input_tokens=20)
    permit = gov.try_acquire(ROUTE, input_tokens=100, max_output_tokens=100)
    permit.settle(anthropic_usage)
    # Anthropic leaves cache reads and writes out of input_tokens: 50 + 30 + 20 in all.
    assert limit(gov, "tenants/acme", "tokens")["in_use"] == 120 + 110

    gov.try_acquire(ROUTE, input_tokens=5).settle({"input_tokens": 7, "output_tokens": 3})
    assert limit(gov, "tenants/acme", "tokens")["in_use"] == 240


def test_settle_keeps_what_is_not_given(gov: llmgov.Governor) -> None:
    permit = gov.try_acquire(ROUTE, input_tokens=100, max_output_tokens=400)
    permit.settle(output_tokens=50)
    assert permit.state == "settled"
    assert limit(gov, "tenants/acme", "tokens")["in_use"] == 150
    with pytest.raises(llmgov.PermitFinished) as again:
        permit.settle(output_tokens=50)
    assert again.value.code == "permit_finished" and again.value.state == "settled"


def test_text_and_messages_are_counted_exactly(gov: llmgov.Governor) -> None:
    permit = gov.try_acquire(ROUTE, text="tiktoken is great!", model="gpt-4o")
    assert permit.charged["input_tokens"] == 6 == llmgov.count_tokens("tiktoken is great!", model="gpt-4o")
    messages = [{"role": "user", "content": "Hello!"}]
    permit = gov.try_acquire(ROUTE, messages=messages, model="gpt-4o")
    assert permit.charged["input_tokens"] == 9 == llmgov.count_chat_tokens(messages, model="gpt-4o")
    assert 0 < llmgov.count_chat_tokens(messages, model="gpt-4o", fast=True)
    assert llmgov.estimate_tokens("hello world") > 0


def test_add_output_and_cancel(gov: llmgov.Governor) -> None:
    permit = gov.try_acquire(ROUTE, input_tokens=10, max_output_tokens=10)
    permit.add_output(25)
    assert limit(gov, "tenants/acme", "tokens")["in_use"] == 35
    permit.cancel()
    assert limit(gov, "tenants/acme", "tokens")["in_use"] == 0
    assert limit(gov, "openai/org/gpt-4o", "concurrency")["in_use"] == 0


def test_report_takes_status_headers_body_or_a_response(gov: llmgov.Governor) -> None:
    body = b'{"error":{"message":"Rate limit reached","type":"tokens","code":"rate_limit_exceeded"}}'
    headers = {"retry-after": "20", "x-ratelimit-remaining-tokens": "0"}
    permit = gov.try_acquire(ROUTE, input_tokens=10)
    report = permit.report(429, headers, body)
    assert report["limited"] and report["kind"] == "rate_limited" and report["retry_after_ms"] == 20_000
    permit.cancel()
    assert gov.snapshot()["admitted_then_provider_rejected"] == 1
    with pytest.raises(llmgov.RateLimited) as held:
        gov.try_acquire(ROUTE, input_tokens=10)
    assert held.value.scope == "openai/org/gpt-4o"

    response = httpx.Response(429, headers=headers, content=body, request=httpx.Request("POST", "http://x/v1"))
    gov.advance(20_000)
    try:
        permit = gov.try_acquire(ROUTE, input_tokens=10)
    except llmgov.RateLimited as slower:  # the provider scope refills slower after a 429
        gov.advance(slower.retry_after_ms)
        permit = gov.try_acquire(ROUTE, input_tokens=10)
    assert permit.report(response)["dimension"] == "tokens"
    import openai

    error = openai.RateLimitError("limited", response=response, body=None)
    assert permit.report(error)["retry_after_ms"] == 20_000
    permit.cancel()


def test_classify_response_fields() -> None:
    c = llmgov.classify_response(
        529, [("content-type", "application/json")], b'{"type":"error","error":{"type":"overloaded_error"}}'
    )
    assert set(c) >= {"limited", "kind", "dimension", "retry_after_ms", "remaining", "limit", "reset_ms", "retryable"}
    assert c["kind"] == "overloaded" and c["retryable"]
    assert llmgov.classify_response(200, {}, b"")["limited"] is False


def test_providers_are_named_as_in_node_and_the_old_names_still_parse() -> None:
    """Python took `open_ai`, Node `openai`: each refused the other's name."""
    for name, old in [("openai", "open_ai"), ("openrouter", "open_router"), ("deepseek", "deep_seek")]:
        for given in (name, old):
            assert llmgov.classify_response(429, {}, b"", provider=given)["provider"] == name


def test_retry_policy_follows_the_core() -> None:
    policy = llmgov.RetryPolicy(max_retries=1, base_delay_ms=100)
    first = policy.advise(429, {"retry-after": "2"}, b"", attempt=0)
    assert first == {"advice": "retry_after", "delay_ms": 2000, "reason": {"code": "rate_limited", "dimension": "unknown"}}
    assert policy.advise(429, {}, b"", attempt=1)["advice"] == "give_up"
    assert policy.advise(400, {}, b"", attempt=0)["reason"]["code"] == "not_retryable"
    assert policy.advise_connection_error(attempt=0, deadline_ms=0)["reason"]["code"] in ("deadline_exceeded", "connection_error")


def test_with_block_cancels_on_error_and_settles_otherwise(gov: llmgov.Governor) -> None:
    with pytest.raises(ValueError):
        with gov.try_acquire(ROUTE, input_tokens=100) as permit:
            raise ValueError("the call failed")
    assert permit.state == "cancelled"
    with gov.try_acquire(ROUTE, input_tokens=100, max_output_tokens=10) as permit:
        permit.settle(output_tokens=5)
    assert limit(gov, "tenants/acme", "tokens")["in_use"] == 105
    with gov.try_acquire(ROUTE, input_tokens=100) as permit:
        pass
    assert permit.state == "settled"


async def test_async_with_block(gov: llmgov.Governor) -> None:
    with pytest.raises(KeyError):
        async with gov.try_acquire(ROUTE, input_tokens=100) as permit:
            raise KeyError("x")
    assert permit.state == "cancelled"
    async with gov.try_acquire(ROUTE, input_tokens=100) as permit:
        permit.settle(output_tokens=1)
    assert permit.state == "settled"


def test_expiry_on_the_manual_clock() -> None:
    gov = llmgov.Governor.from_dict(
        {"permit_ttl": "16s", "scopes": {"p": {"limits": [{"dimension": "concurrency", "amount": 1}]}}}, clock="manual"
    )
    permit = gov.try_acquire("p")
    gov.advance(17_000)
    with pytest.raises(llmgov.PermitExpired) as expired:
        permit.settle()
    assert expired.value.code == "permit_expired"
    assert gov.snapshot()["expired_permits"] == 1
    gov.try_acquire("p").cancel()


def test_counting_long_text_releases_the_gil() -> None:
    """Another thread runs Python while a long text is counted."""
    text = "lorem ipsum dolor sit amet " * 40_000
    ticks = []
    started, done = threading.Event(), threading.Event()

    def ticker() -> None:
        started.set()
        while not done.is_set():
            ticks.append(1)

    thread = threading.Thread(target=ticker)
    thread.start()
    # Running already, so a loaded machine's scheduler can't make it miss
    # the whole count by starting late.
    started.wait()
    try:
        before = len(ticks)
        assert llmgov.count_tokens(text) > 100_000
        during = len(ticks) - before
    finally:
        done.set()
        thread.join()
    # Were the GIL held through the count, the ticker could run only if a
    # forced switch fell in the few bytecodes around the call: rarely, so
    # such a regression fails here almost every time.
    assert during > 100, f"the other thread ran only {during} times while counting"


BAD_ACQUIRE = [
    ({"input_tokens": -1}, "input_tokens", "must not be negative"),
    ({"input_tokens": "12"}, "input_tokens", "not str"),
    ({"input_tokens": 1.5}, "input_tokens", "not float"),
    ({"input_tokens": True}, "input_tokens", "not bool"),
    ({"max_output_tokens": 2**70}, "max_output_tokens", "too large"),
    ({"max_output_tokens": 2**41}, "max_output_tokens", "more than"),
    ({"cached_input_tokens": 5, "input_tokens": 1}, "cached_input_tokens", "exceeds input_tokens"),
    ({"colour": "red"}, "colour", "no argument"),
    ({"text": "hi", "messages": []}, "text", "only one of"),
    ({"text": b"bytes"}, "text", "must be a string"),
    ({"messages": "hi"}, "messages", "list of message dicts"),
    ({"messages": [3]}, "messages[0]", "must be a dict"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content", "string, None or a list"),
    ({"model": 4, "text": "x"}, "model", "must be a string"),
    ({"klass": 1}, "klass", "must be a string"),
]


@pytest.mark.parametrize("kwargs,field,says", BAD_ACQUIRE, ids=[b[1] + ":" + b[2] for b in BAD_ACQUIRE])
def test_bad_acquire_arguments_are_invalid_request(gov: llmgov.Governor, kwargs: Any, field: str, says: str) -> None:
    gov.route(ROUTE)  # makes the tenant's scope, to read it afterwards
    with pytest.raises(llmgov.InvalidRequest) as bad:
        gov.try_acquire(ROUTE, **kwargs)
    assert bad.value.code == "invalid_request" and bad.value.field == field
    assert says in str(bad.value) and field in str(bad.value)
    assert limit(gov, "tenants/acme", "tokens")["in_use"] == 0, "a refused request reserved something"


@pytest.mark.parametrize(
    "paths,error,code",
    [
        ([], llmgov.InvalidRequest, "invalid_request"),
        (42, llmgov.InvalidRequest, "invalid_request"),
        ([1, 2], llmgov.InvalidRequest, "invalid_request"),
        ({"tenants/acme": 1}, llmgov.InvalidRequest, "invalid_request"),  # unhashable: no cache key
        ("nowhere/at/all", llmgov.UnknownScope, "unknown_scope"),
        ("openai//gpt-4o", llmgov.InvalidPath, "invalid_path"),
    ],
)
def test_bad_paths(gov: llmgov.Governor, paths: Any, error: type, code: str) -> None:
    with pytest.raises(error) as bad:
        gov.try_acquire(paths, input_tokens=1)
    assert bad.value.code == code
    if code == "invalid_request":
        assert bad.value.field == "paths" and "paths" in str(bad.value)


def test_bad_settle_and_report_arguments(gov: llmgov.Governor) -> None:
    permit = gov.try_acquire(ROUTE, input_tokens=10)
    for call, field in [
        (lambda: permit.settle(output_tokens=-3), "output_tokens"),
        (lambda: permit.settle({"prompt_tokens": "many"}), "usage.prompt_tokens"),
        (lambda: permit.settle({"tokens": 3}), "usage"),
        (lambda: permit.settle({"input_tokens": 1}, output_tokens=2), "usage"),
        (lambda: permit.add_output(-1), "tokens"),
        (lambda: permit.report(1000, {}, b""), "status"),
        (lambda: permit.report(429, 5, b""), "headers"),
        (lambda: permit.report(429, {}, 7), "body"),
        (lambda: permit.report(object()), "status"),
    ]:
        with pytest.raises(llmgov.InvalidRequest) as bad:
            call()
        assert bad.value.field == field, str(bad.value)
    assert permit.state == "pending", "bad input must not reconcile the permit"
    permit.settle()


def test_bad_configs_are_config_errors(tmp_path: Path) -> None:
    cases = [
        (lambda: llmgov.Governor.from_dict({"scopes": {"a": {"limits": [{"dimension": "tokens", "amount": 0, "window": "1m"}]}}}), "amount"),
        (lambda: llmgov.Governor.from_dict({"scopes": {"a": {"limitz": []}}}), "limitz"),
        (lambda: llmgov.Governor.from_dict({"scopes": {"a": {"limits": [{"dimension": "tokens", "amount": 1, "window": "soon"}]}}}), "window"),
        (lambda: llmgov.Governor.from_dict([1, 2]), "config"),  # type: ignore[arg-type]
        (lambda: llmgov.Governor.from_dict({"scopes": {"a": object()}}), "config"),
        (lambda: llmgov.Governor.from_toml(tmp_path / "missing.toml"), "path"),
        (lambda: llmgov.Governor.from_toml("[scopes"), "scopes"),
        (lambda: llmgov.Governor.from_preset("openai-gpt-4o-tier1", clock="sundial"), "clock"),  # type: ignore[arg-type]
    ]
    for call, field in cases:
        with pytest.raises(llmgov.ConfigError) as bad:
            call()
        assert bad.value.code == "invalid_config"
        assert field in str(bad.value), str(bad.value)
    with pytest.raises(llmgov.UnknownPreset) as unknown:
        llmgov.Governor.from_preset("openai-gpt-9")
    assert "openai-gpt-4o-tier1" in unknown.value.known


def test_a_config_dict_value_with_no_json_form_is_named_by_its_path() -> None:
    limits = [{"dimension": "requests", "amount": 10, "window": "1m"}]
    cases = [
        ({"safety_margin": float("nan"), "scopes": {"a": {"limits": limits}}}, "safety_margin", "nan"),
        ({"scopes": {"p": {"provider": True, "limits": [{"dimension": "tokens", "amount": float("inf"), "window": "1m"}]}}},
         "scopes.p.limits[0].amount", "inf"),
        ({"scopes": {"a": {"limits": [object]}}}, "scopes.a.limits[0]", "<class 'object'>"),
    ]
    for config, field, value in cases:
        with pytest.raises(llmgov.ConfigError) as bad:
            llmgov.Governor.from_dict(config)
        assert (bad.value.field, bad.value.value) == (field, value), str(bad.value)


def test_advance_needs_the_manual_clock() -> None:
    gov = llmgov.Governor.from_preset("openai-gpt-4o-tier1")
    with pytest.raises(llmgov.InvalidRequest) as bad:
        gov.advance(10)
    assert bad.value.field == "clock"
    manual = llmgov.Governor.from_preset("openai-gpt-4o-tier1", clock="manual")
    for ms in (-1, float("nan"), "10"):
        with pytest.raises(llmgov.InvalidRequest):
            manual.advance(ms)  # type: ignore[arg-type]
    manual.advance(1.5)
    assert manual.now_ms == 1.5


@pytest.mark.parametrize(
    "build",
    [
        lambda clock: llmgov.Governor.from_toml(CONFIG, clock=clock),
        lambda clock: llmgov.Governor.from_json('{"scopes": {}}', clock=clock),
        lambda clock: llmgov.Governor.from_dict({"scopes": {}}, clock=clock),
        lambda clock: llmgov.Governor.from_preset("openai-gpt-4o-tier1", clock=clock),
    ],
    ids=["toml", "json", "dict", "preset"],
)
def test_a_clock_that_is_not_a_name_is_a_config_error(build: Any) -> None:
    for clock, shown in [(5, "5"), ("\udcff", "'\\udcff'")]:
        with pytest.raises(llmgov.ConfigError) as bad:
            build(clock)
        assert (bad.value.field, bad.value.value) == ("clock", shown)
    assert "monotonic" in repr(build(None)), "None is the default clock"


def test_a_config_source_that_is_not_text_is_a_config_error() -> None:
    with pytest.raises(llmgov.ConfigError) as text:
        llmgov.Governor.from_json(5)  # type: ignore[arg-type]
    assert (text.value.field, text.value.value) == ("text", "5")
    with pytest.raises(llmgov.ConfigError) as name:
        llmgov.Governor.from_preset(5)  # type: ignore[arg-type]
    assert (name.value.field, name.value.value) == ("name", "5")


@pytest.mark.parametrize("paths", ["openai/\udcff", ["tenants/\udcff", "openai/org/gpt-4o"], ("tenants/\udcff",)])
def test_a_path_with_a_lone_surrogate_names_paths(gov: llmgov.Governor, paths: Any) -> None:
    for call in (lambda: gov.route(paths), lambda: gov.try_acquire(paths, 1)):
        with pytest.raises(llmgov.InvalidRequest) as bad:
            call()
        assert bad.value.field == "paths" and "lone surrogate" in bad.value.reason


def test_a_profile_path_or_name_with_a_lone_surrogate_is_invalid_request() -> None:
    gov = llmgov.Governor.from_dict(
        {
            "scopes": {"openai/org": {"provider": True, "limits": [{"dimension": "requests", "amount": 9, "window": "1m"}]}},
            "profiles": {"main": {"deployments": ["openai/org"]}},
        },
        clock="manual",
    )
    with pytest.raises(llmgov.InvalidRequest) as paths:
        gov.try_acquire_profile("main", 1, paths="tenants/\udcff")
    assert paths.value.field == "paths"
    with pytest.raises(llmgov.InvalidRequest) as name:
        gov.try_acquire_profile("ma\udcffin", 1)
    assert name.value.field == "profile"


@pytest.mark.parametrize(
    "usage, key, expected",
    [
        ({"input_tokens": 100, "outputTokens": 500}, "outputTokens", "output_tokens"),
        ({"input_tokens": 100, "completion_tokens": 500}, "completion_tokens", "output_tokens"),
        ({"prompt_tokens": 100, "output_tokens": 500}, "output_tokens", "completion_tokens"),
        ({"prompt_tokens": 100, "completion_token": 500}, "completion_token", "completion_tokens"),
    ],
)
def test_an_output_count_under_another_key_is_refused_not_settled_as_zero(
    gov: llmgov.Governor, usage: Any, key: str, expected: str
) -> None:
    permit = gov.try_acquire(ROUTE, input_tokens=100, max_output_tokens=500)
    with pytest.raises(llmgov.InvalidRequest) as bad:
        permit.settle(usage)
    assert (bad.value.field, bad.value.value) == (f"usage.{key}", "500")
    assert f"gives its output as `{expected}`" in bad.value.reason
    assert permit.state == "pending", "the refused usage must not reconcile the permit"
    # The right key, or none at all (an embeddings usage has no output), settles.
    permit.settle({"input_tokens": 100, "output_tokens": None, "total_tokens": 100})
    assert limit(gov, "tenants/acme", "tokens")["in_use"] == 100


def test_lone_surrogates_in_headers_messages_and_config_paths_name_the_field(
    gov: llmgov.Governor, tmp_path: Path
) -> None:
    permit = gov.try_acquire(ROUTE, input_tokens=10)
    requests = [
        (lambda: permit.report(429, {"retry-after": "\udcff"}), "headers"),
        (lambda: permit.report(429, {}, "\udcff"), "body"),
        (lambda: llmgov.classify_response(429, {"x-\udcff": "1"}), "headers"),
        (lambda: gov.try_acquire(ROUTE, messages=[{"role": "user", "content": "\udcff"}]), "messages[0].content"),
        (
            lambda: gov.try_acquire(ROUTE, messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, "\udcff"]}]),
            "messages[0].content[1]",
        ),
    ]
    for call, field in requests:
        with pytest.raises(llmgov.InvalidRequest) as bad:
            call()
        assert bad.value.field == field and "lone surrogate" in bad.value.reason, str(bad.value)
    assert permit.state == "pending"
    configs = [
        (lambda: llmgov.Governor.from_toml(tmp_path / "\udcff.toml"), "path"),
        (lambda: llmgov.Governor.from_toml(str(tmp_path / "\udcff.toml")), "source"),
        (lambda: llmgov.Governor.from_dict({"scopes": {"\udcff": {"limits": []}}}), "scopes"),
    ]
    for call, field in configs:
        with pytest.raises(llmgov.ConfigError) as bad_config:
            call()
        assert bad_config.value.field == field and "lone surrogate" in bad_config.value.reason, str(bad_config.value)


def test_wrong_types_name_the_argument() -> None:
    """Each was a bare TypeError without the field."""
    cases = [
        (lambda: llmgov.classify_response(429, provider=5), "provider", "5"),  # type: ignore[arg-type]
        (lambda: llmgov.classify_response(429, provider="nope"), "provider", "nope"),
        (lambda: llmgov.RetryPolicy().advise(429, attempt=0, provider=1), "provider", "1"),  # type: ignore[arg-type]
        (lambda: llmgov.count_chat_tokens([], fast="yes"), "fast", "'yes'"),  # type: ignore[arg-type]
        (lambda: llmgov.count_chat_tokens([], fast=1), "fast", "1"),  # type: ignore[arg-type]
        (lambda: llmgov.RetryPolicy(budget_ratio=True), "budget_ratio", "True"),
    ]
    for call, field, value in cases:
        with pytest.raises(llmgov.InvalidRequest) as bad:
            call()
        assert (bad.value.field, bad.value.value) == (field, value)
    # The defaults still hold when the arguments are left out.
    assert llmgov.classify_response(429)["limited"]
    assert llmgov.count_chat_tokens([{"role": "user", "content": "hi"}], fast=True) > 0


def test_a_float_count_in_settle_names_input_tokens(gov: llmgov.Governor) -> None:
    permit = gov.try_acquire(ROUTE, input_tokens=10)
    for call in (lambda: permit.settle(1.5, 0), lambda: permit.settle(1.5)):
        with pytest.raises(llmgov.InvalidRequest) as bad:
            call()
        assert (bad.value.field, bad.value.value) == ("input_tokens", "1.5")
        assert "integer" in bad.value.reason
    assert permit.state == "pending"
    permit.settle(10, 0)


def test_advance_past_2_63_ns_is_refused() -> None:
    gov = llmgov.Governor.from_preset("openai-gpt-4o-tier1", clock="manual")
    for ms in (2**70, 1e300, 2**63 / 1e6 + 1):
        with pytest.raises(llmgov.InvalidRequest) as bad:
            gov.advance(ms)
        assert bad.value.field == "ms"
    assert gov.now_ms == 0
    gov.advance(2**62 / 1e6)  # about 146 years: allowed
    with pytest.raises(llmgov.InvalidRequest):
        gov.advance(2**62 / 1e6 + 1e6)  # together past 2^63 ns
    gov.try_acquire("openai/org/gpt-4o", 1).settle()


def test_an_int_past_a_floats_range_is_refused_as_too_large_not_as_not_a_number() -> None:
    """10**400 was refused as "must be a number ..., not int"."""
    gov = llmgov.Governor.from_preset("openai-gpt-4o-tier1", clock="manual")
    with pytest.raises(llmgov.InvalidRequest) as bad:
        gov.advance(10**400)
    assert bad.value.field == "ms" and "not int" not in bad.value.reason and "finite" in bad.value.reason
    with pytest.raises(llmgov.InvalidRequest) as bad:
        llmgov.plan_capacity(rpm=60, avg_input=10**400, avg_output=1)
    assert bad.value.field == "avg_input" and "not int" not in bad.value.reason, bad.value.reason
    with pytest.raises(llmgov.InvalidRequest) as bad:
        llmgov.plan_capacity(rpm=60, avg_input=-(10**400), avg_output=1)
    assert bad.value.field == "avg_input" and "not int" not in bad.value.reason, bad.value.reason


def test_every_error_is_an_llmgov_error_with_a_code() -> None:
    for cls in (
        llmgov.RateLimited,
        llmgov.NeverFits,
        llmgov.ConfigError,
        llmgov.InvalidPath,
        llmgov.UnknownScope,
        llmgov.UnknownPreset,
        llmgov.InvalidRequest,
        llmgov.PermitFinished,
        llmgov.PermitExpired,
        llmgov.DeadlineExceeded,
        llmgov.QueueFull,
        llmgov.CircuitOpen,
    ):
        assert issubclass(cls, llmgov.Error) and isinstance(cls.code, str) and cls.code != "error"
    assert llmgov.errors.RateLimited is llmgov.RateLimited


def test_the_readme_quickstart_runs() -> None:
    import runpy

    runpy.run_path(str(Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"), run_name="__main__")


def test_the_transport_example_runs(mock_server_factory: Any) -> None:
    import asyncio
    import runpy

    config = (Path(__file__).resolve().parents[2] / "cli" / "mock" / "test.toml").read_text()
    server = mock_server_factory(config)
    example = runpy.run_path(str(Path(__file__).resolve().parents[1] / "examples" / "openai_transport.py"))
    asyncio.run(example["main"](server.url))


def test_the_readme_quick_start_is_the_example() -> None:
    """The README's Python quick start is examples/quickstart.py, which runs above."""
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    block = readme.split("```python\n", 1)[1].split("```", 1)[0]
    example = (root / "examples" / "quickstart.py").read_text().split('"""', 2)[2].lstrip("\n")
    assert block == example
