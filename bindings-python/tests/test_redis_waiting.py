"""Waiting on a RedisGovernor: ``acquire_blocking`` and ``await acquire``
sleep until the refusing shared limit could admit the request, give up at
their deadline (at once when the predicted wait is already past it), hold
nothing when cancelled or interrupted, and check their arguments.

Against the server named by ``LLMGOV_REDIS_URL`` (``make test-redis-python``
starts one); skipped without it."""

from __future__ import annotations

import _thread
import asyncio
import os
import threading
import time
from typing import Callable

import pytest

import llmgov
from llmgov.redis import RedisGovernor

TIMEOUT = "2s"  # see test_redis_api.py: a slow call is not an outage
SCOPE = "openai/org/gpt-4o"


def redis_url() -> str:
    url = os.environ.get("LLMGOV_REDIS_URL", "")
    if not url:
        pytest.skip("LLMGOV_REDIS_URL is not set (run `make test-redis-python`, which starts a redis-server)")
    return url


def fresh_prefix(test: str) -> str:
    return f"py-wait-{test}-{os.getpid()}-{time.time_ns()}"


def config(prefix: str, limit: str) -> str:
    return f"""
[scopes."{SCOPE}"]
limits = [{limit}]
[redis]
url = "{redis_url()}"
prefix = "{prefix}"
expected_processes = 1
timeout = "{TIMEOUT}"
[redis.scopes."{SCOPE}"]
mode = "exact"
"""


def governor(test: str, limit: str, clock: str = "monotonic") -> RedisGovernor:
    return RedisGovernor.from_toml(config(fresh_prefix(test), limit), clock=clock)


FIVE_A_SECOND = '{ dimension = "requests", amount = 5, window = "1s" }'
ONE_A_MINUTE = '{ dimension = "requests", amount = 1, window = "1m" }'
ONE_SLOT = '{ dimension = "concurrency", amount = 1 }'


def drain(gov: RedisGovernor) -> None:
    for _ in range(5):
        gov.try_acquire(SCOPE, 10, 10).settle()
    with pytest.raises(llmgov.RateLimited):
        gov.try_acquire(SCOPE, 10, 10)


def when_polling(gov: RedisGovernor, then: Callable[[], None]) -> threading.Thread:
    """Runs `then` on a thread once `gov` has been refused at least once more."""
    calls = gov.health()["redis_calls"]

    def watch() -> None:
        guard = time.monotonic() + 30
        while gov.health()["redis_calls"] < calls + 2 and time.monotonic() < guard:
            time.sleep(0.001)
        then()

    thread = threading.Thread(target=watch)
    thread.start()
    return thread


def test_acquire_blocking_sleeps_until_the_shared_bucket_refills() -> None:
    gov = governor("blocking", FIVE_A_SECOND)
    drain(gov)
    calls = gov.health()["redis_calls"]
    with gov.acquire_blocking(SCOPE, 10, 10, timeout=5) as permit:
        assert permit.state == "pending"
    # It slept for the time Redis predicted rather than asking again and again.
    assert gov.health()["redis_calls"] - calls <= 3


def test_await_acquire_sleeps_on_the_loop_until_the_bucket_refills() -> None:
    gov = governor("async", FIVE_A_SECOND)
    drain(gov)

    async def main() -> str:
        permit = await gov.acquire(SCOPE, input_tokens=10, max_output_tokens=10, deadline_ms=5000)
        permit.settle()
        return permit.state

    assert asyncio.run(main()) == "settled"


def test_a_predicted_wait_past_the_deadline_is_refused_at_once() -> None:
    gov = governor("predicted", ONE_A_MINUTE, clock="manual")
    first = gov.try_acquire(SCOPE, 10, 10)
    with pytest.raises(llmgov.DeadlineExceeded) as blocking:
        gov.acquire_blocking(SCOPE, 10, 10, timeout=1)
    with pytest.raises(llmgov.DeadlineExceeded) as awaited:
        asyncio.run(gov.acquire(SCOPE, 10, 10, deadline_ms=1000))
    for refused in (blocking.value, awaited.value):
        assert refused.code == "deadline_exceeded"
        assert refused.waited_ms == 0  # the manual clock stood still
        assert refused.retry_after_ms > 50_000  # the next request passes in about a minute
    # The sooner of deadline_ms and timeout bounds a blocking wait.
    with pytest.raises(llmgov.DeadlineExceeded):
        gov.acquire_blocking(SCOPE, 10, 10, deadline_ms=1000, timeout=3600)
    first.settle()


def test_a_slot_freed_by_another_governor_goes_to_the_waiter() -> None:
    # Two governors on one prefix stand for two processes.
    shared = config(fresh_prefix("slot"), ONE_SLOT)
    holder, waiter = RedisGovernor.from_toml(shared), RedisGovernor.from_toml(shared)
    held = holder.try_acquire(SCOPE, 10, 10)
    releaser = when_polling(waiter, held.settle)
    permit = waiter.acquire_blocking(SCOPE, 10, 10, timeout=30)
    releaser.join()
    with pytest.raises(llmgov.RateLimited) as refused:
        holder.try_acquire(SCOPE, 10, 10)
    assert refused.value.dimension == "concurrency"
    permit.settle()


def test_a_cancelled_or_interrupted_waiter_holds_nothing() -> None:
    gov = governor("cancel", ONE_SLOT)
    held = gov.try_acquire(SCOPE, 10, 10)

    async def cancel_while_waiting() -> None:
        task = asyncio.ensure_future(gov.acquire(SCOPE, 10, 10))
        await asyncio.sleep(0.02)  # let it be refused and go to sleep
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_while_waiting())
    interrupter = when_polling(gov, _thread.interrupt_main)
    with pytest.raises(KeyboardInterrupt):
        # Without a look at signals between naps, this would end in DeadlineExceeded.
        gov.acquire_blocking(SCOPE, 10, 10, timeout=10)
    interrupter.join()
    held.settle()
    # The slot is free: neither waiter took it.
    gov.try_acquire(SCOPE, 10, 10).settle()


def test_what_waiting_cannot_mend_is_raised_at_once_and_bad_arguments_are_named() -> None:
    gov = governor("args", FIVE_A_SECOND)
    with pytest.raises(llmgov.InvalidRequest) as bad:
        gov.acquire_blocking(SCOPE, 10, 10, timeout=-1)
    assert bad.value.field == "timeout"
    with pytest.raises(llmgov.InvalidRequest) as bad:
        asyncio.run(gov.acquire(SCOPE, 10, 10, deadline_ms="soon"))
    assert bad.value.field == "deadline_ms"
    with pytest.raises(llmgov.InvalidRequest, match="no traffic classes") as bad:
        gov.acquire_blocking(SCOPE, 10, 10, klass="batch")
    assert bad.value.field == "klass"
    cost_limited = governor("never", '{ dimension = "tokens", amount = 100, window = "1m" }')
    with pytest.raises(llmgov.NeverFits):
        cost_limited.acquire_blocking(SCOPE, 100, 10)
