"""RedisGovernor and the keyword arguments a local Governor takes: None for
an option it has no use for (a traffic class, a priority, an expected
output) is accepted, a value is refused by name; and the httpx transports
under the real OpenAI SDK, against `llmgov mock-server`: two governors
spend one shared budget between them, and a 429 is reported into the
route's local provider scope (`RedisPermit.report`), or holds a shared one
in Redis for both, as a breaker that failures open does.

The tests marked ``needs_redis`` run against ``LLMGOV_REDIS_URL`` (``make
test-redis-python`` starts a redis-server) and are skipped without it."""

from __future__ import annotations

import asyncio
import os
import socket
import time

from typing import Any

import httpx
import openai
import pytest

import llmgov
from llmgov.httpx import AsyncGovernedTransport, GovernedTransport
from llmgov.redis import RedisGovernor


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{s.getsockname()[1]}"


def config(url: str) -> str:
    return f"""
[scopes."p/shared"]
limits = [{{ dimension = "tokens", amount = 1000, window = "1d" }}]
[redis]
url = "{url}"
prefix = "py-transport-{os.getpid()}-{time.time_ns()}"
expected_processes = 2
timeout = "2s"
[redis.scopes."p/shared"]
mode = "exact"
"""


# What GovernedTransport passes to the governor's acquire for every request.
TRANSPORT_OPTIONS = {"klass": None, "priority": None, "deadline_ms": None}


def admits_with_none_options(gov: RedisGovernor) -> None:
    permit = gov.try_acquire("p/shared", input_tokens=10, max_output_tokens=5, klass=None, expected_output_tokens=None)
    permit.settle(10, 5)
    blocking = gov.acquire_blocking("p/shared", input_tokens=10, max_output_tokens=5, expected_output_tokens=None, **TRANSPORT_OPTIONS)
    blocking.cancel()

    async def waits() -> None:
        permit = await gov.acquire("p/shared", input_tokens=10, max_output_tokens=5, expected_output_tokens=None, **TRANSPORT_OPTIONS)
        permit.cancel()

    asyncio.run(waits())


def test_none_for_the_local_governors_options_is_accepted_without_redis() -> None:
    admits_with_none_options(RedisGovernor.from_toml(config(closed_port_url()), clock="manual"))


def test_a_value_for_an_option_it_cannot_honour_is_refused_by_name() -> None:
    gov = RedisGovernor.from_toml(config(closed_port_url()), clock="manual")
    for call, field in [
        (lambda: gov.try_acquire("p/shared", input_tokens=1, klass="batch"), "klass"),
        (lambda: gov.try_acquire("p/shared", input_tokens=1, expected_output_tokens=3), "expected_output_tokens"),
        (lambda: gov.acquire_blocking("p/shared", input_tokens=1, priority=2), "priority"),
        # try_acquire never waits: the local one takes no priority either.
        (lambda: gov.try_acquire("p/shared", input_tokens=1, priority=None), "priority"),
        (lambda: gov.try_acquire("p/shared", input_tokens=1, bogus=None), "bogus"),
    ]:
        with pytest.raises(llmgov.InvalidRequest) as refused:
            call()
        assert refused.value.field == field, str(refused.value)


def test_the_transports_refuse_a_class_or_priority_for_a_redis_governor_naming_it() -> None:
    gov = RedisGovernor.from_toml(config(closed_port_url()), clock="manual")
    mock = httpx.MockTransport(lambda request: httpx.Response(200))
    for transport in (GovernedTransport, AsyncGovernedTransport):
        for option in ({"klass": "batch"}, {"priority": 3}):
            with pytest.raises(llmgov.InvalidRequest) as refused:
                transport(gov, paths="p/shared", transport=mock, **option)  # type: ignore[arg-type]
            assert refused.value.field == next(iter(option)), str(refused.value)
        transport(gov, paths="p/shared", transport=mock)  # type: ignore[arg-type]


def test_none_for_the_local_governors_options_is_accepted_against_redis() -> None:
    url = os.environ.get("LLMGOV_REDIS_URL", "")
    if not url:
        pytest.skip("LLMGOV_REDIS_URL is not set (run `make test-redis-python`, which starts a redis-server)")
    gov = RedisGovernor.from_toml(config(url))
    admits_with_none_options(gov)
    assert not gov.health()["degraded"] and gov.health()["redis_calls"] > 0


def redis_url() -> str:
    url = os.environ.get("LLMGOV_REDIS_URL", "")
    if not url:
        pytest.skip("LLMGOV_REDIS_URL is not set (run `make test-redis-python`, which starts a redis-server)")
    return url


def governed_config(
    url: str, prefix: str, budget: int, provider_rpm: int, provider_mode: str | None = None, head: str = ""
) -> str:
    """A team budget shared through Redis, and the provider's scope local
    (or shared too, in `provider_mode`); `head` goes first (`[adaptive]`)."""
    shared_provider = f'[redis.scopes."openai/org/gpt-4o"]\nmode = "{provider_mode}"' if provider_mode else ""
    return f"""{head}
[scopes."team"]
limits = [{{ dimension = "tokens", amount = {budget}, window = "30d" }}]
[scopes."openai/org/gpt-4o"]
provider = true
limits = [{{ dimension = "requests", amount = {provider_rpm}, window = "1m" }}]
[redis]
url = "{url}"
prefix = "{prefix}"
expected_processes = 2
timeout = "2s"
[redis.scopes."team"]
mode = "exact"
{shared_provider}
"""


MOCK = """
[server]
seed = 5
output_tokens = {{ min = 5, max = 20 }}

[openai]
shape = "openai"
charging = "actual"
limits = [{{ dimension = "requests", amount = {rpm}, window = "1m" }}]
latency = {{ ttft_ms = 1, ms_per_output_token = 0.1 }}
"""

PATHS = ["team", "openai/org/gpt-4o"]


def client(gov: RedisGovernor, server: Any, **options: Any) -> openai.OpenAI:
    transport = GovernedTransport(gov, paths=PATHS, deadline_ms=1, **options)
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="k", max_retries=0, http_client=httpx.Client(transport=transport))


def ask(sdk: openai.OpenAI) -> int:
    """One chat call; the tokens the provider says it used."""
    answer = sdk.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}], max_tokens=20)
    assert answer.usage is not None
    return answer.usage.total_tokens


def test_two_redis_governors_spend_one_budget_through_the_openai_sdk(mock_server_factory: Any) -> None:
    url = redis_url()
    server = mock_server_factory(MOCK.format(rpm=10_000))
    prefix = f"py-sdk-budget-{os.getpid()}-{time.time_ns()}"
    governors = [RedisGovernor.from_toml(governed_config(url, prefix, budget=400, provider_rpm=10_000)) for _ in range(2)]
    sdks = [client(gov, server) for gov in governors]
    used = [0, 0]
    for turn in range(100):
        try:
            used[turn % 2] += ask(sdks[turn % 2])
        except llmgov.DeadlineExceeded as refused:
            # The budget is spent: the governor refused before sending, as
            # the wait it predicts is past the transport's deadline.
            assert refused.retry_after_ms > 60_000, str(refused)
            break
    else:
        raise AssertionError("the shared budget never ran out")
    assert min(used) > 0, f"both governors spent it: {used}"
    # Each call reserves about 30 tokens (its prompt and max_tokens) and
    # settles what it used: together they spent the budget, no more.
    assert 400 - 40 < sum(used) <= 400, used
    assert all(not gov.health()["degraded"] for gov in governors)


def test_a_429_through_the_transport_holds_the_local_provider_scope(mock_server_factory: Any) -> None:
    url = redis_url()
    server = mock_server_factory(MOCK.format(rpm=1))
    prefix = f"py-sdk-429-{os.getpid()}-{time.time_ns()}"
    # The governor allows 100 a minute where the provider allows 1, which
    # an ungoverned client takes first.
    gov = RedisGovernor.from_toml(governed_config(url, prefix, budget=100_000, provider_rpm=100))
    ask(openai.OpenAI(base_url=f"{server.url}/v1", api_key="k", max_retries=0))
    sdk = client(gov, server, retry=llmgov.RetryPolicy(max_retries=0))
    with pytest.raises(openai.RateLimitError):
        ask(sdk)
    # The answer's retry-after now holds the provider's scope here.
    with pytest.raises(llmgov.RateLimited) as held:
        gov.try_acquire(PATHS, input_tokens=1)
    assert held.value.scope == "openai/org/gpt-4o" and held.value.retry_after_ms > 1000, str(held.value)
    assert gov.snapshot()["admitted_then_provider_rejected"] == 1


def test_a_429_through_the_transport_holds_a_shared_provider_scope_for_both_governors(mock_server_factory: Any) -> None:
    url = redis_url()
    server = mock_server_factory(MOCK.format(rpm=1))
    prefix = f"py-sdk-429-shared-{os.getpid()}-{time.time_ns()}"
    config = governed_config(url, prefix, budget=100_000, provider_rpm=100, provider_mode="exact")
    first, second = (RedisGovernor.from_toml(config) for _ in range(2))
    ask(openai.OpenAI(base_url=f"{server.url}/v1", api_key="k", max_retries=0))
    with pytest.raises(openai.RateLimitError):
        ask(client(first, server, retry=llmgov.RetryPolicy(max_retries=0)))
    # The 429 came to the first governor; Redis holds the provider's scope for both.
    for gov in (second, first):
        with pytest.raises(llmgov.RateLimited) as held:
            gov.try_acquire(PATHS, input_tokens=1)
        assert held.value.scope == "openai/org/gpt-4o" and held.value.retry_after_ms > 1000, str(held.value)
    assert all(not gov.health()["degraded"] for gov in (first, second))


def test_failures_through_the_transport_open_a_breaker_that_holds_a_shared_provider_scope_for_both(
    mock_server_factory: Any,
) -> None:
    url = redis_url()
    server = mock_server_factory(MOCK.format(rpm=1000) + "chaos = { error_500 = 1.0 }\n")
    prefix = f"py-sdk-breaker-{os.getpid()}-{time.time_ns()}"
    head = '[adaptive.breaker]\nfailures = 2\npauses = ["30s"]'
    config = governed_config(url, prefix, budget=100_000, provider_rpm=100, provider_mode="exact", head=head)
    first, second = (RedisGovernor.from_toml(config) for _ in range(2))
    sdk = client(first, server, retry=llmgov.RetryPolicy(max_retries=0))
    with pytest.raises(openai.InternalServerError):
        ask(sdk)
    second.try_acquire(PATHS, input_tokens=1).cancel()  # one failure of two holds nothing
    with pytest.raises(openai.InternalServerError):
        ask(sdk)
    # The first governor's breaker opened; Redis holds the provider's scope for both, for its pause.
    for gov in (second, first):
        with pytest.raises(llmgov.RateLimited) as held:
            gov.try_acquire(PATHS, input_tokens=1)
        assert held.value.scope == "openai/org/gpt-4o" and 29_000 < held.value.retry_after_ms <= 31_000, str(held.value)
    assert all(not gov.health()["degraded"] for gov in (first, second))


def test_report_classifies_an_answer_and_names_bad_input_without_redis() -> None:
    gov = RedisGovernor.from_toml(config(closed_port_url()), clock="manual")
    permit = gov.try_acquire("p/shared", input_tokens=10, max_output_tokens=5)
    classified = permit.report(429, {"retry-after": "5"}, b"")
    assert classified["limited"] and classified["retry_after_ms"] == 5000, classified
    assert not permit.report(httpx.Response(200, headers={"x-ratelimit-remaining-requests": "9"}))["limited"]
    bad_calls = [
        (lambda: permit.report("429"), "status"),
        (lambda: permit.report(429, bogus=1), "bogus"),  # type: ignore[call-arg]
    ]
    for call, field in bad_calls:
        with pytest.raises(llmgov.InvalidRequest) as bad:
            call()
        assert bad.value.field == field, str(bad.value)
    permit.settle(10, 5)
    assert permit.report(200)["status"] == 200, "after settling too"
