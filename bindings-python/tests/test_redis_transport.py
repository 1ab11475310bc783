"""RedisGovernor and the keyword arguments a local Governor takes: None for
an option it has no use for (a traffic class, a priority, an expected
output) is accepted, a value is refused by name; and the httpx transports,
which need `permit.report` (RedisPermit has none), refuse a RedisGovernor
at once with a clear InvalidRequest instead of failing every request.

The tests marked ``needs_redis`` run against ``LLMGOV_REDIS_URL`` (``make
test-redis-python`` starts a redis-server) and are skipped without it."""

from __future__ import annotations

import asyncio
import os
import socket
import time

import httpx
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


def test_the_httpx_transports_refuse_a_redis_governor_naming_it() -> None:
    gov = RedisGovernor.from_toml(config(closed_port_url()), clock="manual")
    for transport in (GovernedTransport, AsyncGovernedTransport):
        with pytest.raises(llmgov.InvalidRequest) as refused:
            transport(gov, paths="p/shared", transport=httpx.MockTransport(lambda request: httpx.Response(200)))  # type: ignore[arg-type]
        assert refused.value.field == "governor"
        assert "report" in refused.value.reason


def test_none_for_the_local_governors_options_is_accepted_against_redis() -> None:
    url = os.environ.get("LLMGOV_REDIS_URL", "")
    if not url:
        pytest.skip("LLMGOV_REDIS_URL is not set (run `make test-redis-python`, which starts a redis-server)")
    gov = RedisGovernor.from_toml(config(url))
    admits_with_none_options(gov)
    assert not gov.health()["degraded"] and gov.health()["redis_calls"] > 0
