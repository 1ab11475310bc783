"""A Permit or RedisPermit shared between threads: calls on it serialise,
and a call that finds it finished raises the package's typed error, never
a bare RuntimeError ("Already borrowed")."""

from __future__ import annotations

import threading
from typing import Any, Callable, List

import httpx
import pytest

import llmgov
from llmgov.redis import AlreadyReconciled, RedisGovernor

CONFIG = """
[scopes."openai/org/gpt-4o"]
provider = true
limits = [
  { dimension = "requests", amount = 600, window = "1m" },
  { dimension = "tokens", amount = 10000000, window = "1m" },
]
"""


def in_thread(call: Callable[[], Any]) -> List[BaseException]:
    """Runs `call` on another thread and waits for it, returning what it raised."""
    raised: List[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as error:  # noqa: BLE001 - the test inspects it
            raised.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return raised


class UsageCancelling:
    """An SDK-like usage object whose attribute access cancels `permit` on
    another thread: Python code running in the middle of `settle`."""

    def __init__(self) -> None:
        self.permit: Any = None
        self.seen: List[Any] = []

    @property
    def input_tokens(self) -> int:
        self.seen.extend(in_thread(lambda: self.seen.append(self.permit.state)))
        self.seen.extend(in_thread(self.permit.cancel))
        return 10

    output_tokens = 5


def test_settle_with_a_usage_object_running_python_while_another_thread_cancels() -> None:
    gov = llmgov.Governor.from_toml(CONFIG, clock="manual")
    permit = gov.try_acquire("openai/org/gpt-4o", input_tokens=10, max_output_tokens=10)
    usage = UsageCancelling()
    usage.permit = permit
    # The other thread's state and cancel went through: the usage was read
    # before the permit was locked, so this settle finds it cancelled.
    with pytest.raises(llmgov.PermitFinished):
        permit.settle(usage)
    assert usage.seen == ["pending"]
    assert permit.state == "cancelled"


def test_streamed_output_from_one_thread_while_another_reports_is_never_lost() -> None:
    gov = llmgov.Governor.from_toml(CONFIG, clock="manual")
    permit = gov.try_acquire("openai/org/gpt-4o", input_tokens=10, max_output_tokens=0)
    response = httpx.Response(200, headers={"x-ratelimit-remaining-requests": "599"}, content=b"{}")
    done = threading.Event()
    raised: List[BaseException] = []

    def report() -> None:
        try:
            while not done.is_set():
                permit.report(response)
        except BaseException as error:  # noqa: BLE001
            raised.append(error)

    reporter = threading.Thread(target=report)
    reporter.start()
    try:
        for _ in range(5000):
            permit.add_output(1)
    finally:
        done.set()
        reporter.join()
    assert raised == []
    assert permit.charged["output_tokens"] == 5000


def closed_port_url() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://127.0.0.1:{port}"


def redis_gov() -> RedisGovernor:
    # Redis away: the safe local share serves the shared scope, no server needed.
    return RedisGovernor.from_toml(
        f"""
[scopes."p/shared"]
limits = [{{ dimension = "tokens", amount = 1000, window = "1d" }}]
[redis]
url = "{closed_port_url()}"
prefix = "py-threads"
expected_processes = 2
[redis.scopes."p/shared"]
mode = "exact"
""",
        clock="manual",
    )


def test_redis_permit_settle_with_a_usage_object_running_python_while_another_thread_cancels() -> None:
    gov = redis_gov()
    permit = gov.try_acquire("p/shared", input_tokens=10, max_output_tokens=10)
    usage = UsageCancelling()
    usage.permit = permit
    with pytest.raises(AlreadyReconciled):
        permit.settle(usage)
    assert usage.seen == ["pending"]
    assert permit.state == "cancelled"
    assert permit.charged == {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}


def test_redis_permit_settled_from_two_threads_settles_once() -> None:
    gov = redis_gov()
    permit = gov.try_acquire("p/shared", input_tokens=10, max_output_tokens=10)
    results: List[BaseException] = []
    threads = [threading.Thread(target=lambda: results.extend(in_thread(lambda: permit.settle(8, 2)))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 3 and all(isinstance(e, AlreadyReconciled) for e in results), results
    assert permit.state == "settled"
