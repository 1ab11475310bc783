"""Waiting for admission on the manual clock: `await gov.acquire`,
`gov.acquire_blocking` (the GIL released while parked), `gov.reserve`, and
the queue's refusals as exceptions."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import threading
import warnings
from typing import Any, Awaitable, Callable

import pytest
from conftest import until

import llmgov
from llmgov import _wake

CONFIG = {
    "scopes": {"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1s"}]}},
    "classes": {"tight": {"queue_bound": 1}},
}


@pytest.fixture
def gov() -> llmgov.Governor:
    gov = llmgov.Governor.from_dict(CONFIG, clock="manual")
    gov.try_acquire("p").settle()  # the only request of this second
    return gov


def depth(gov: llmgov.Governor) -> int:
    return gov.queue_metrics()["depth"]


async def test_acquire_waits_until_the_clock_refills(gov: llmgov.Governor) -> None:
    waiting = asyncio.ensure_future(gov.acquire("p"))
    await until(lambda: depth(gov) == 1)
    assert not waiting.done()
    gov.advance(999)
    await asyncio.sleep(0.01)
    assert not waiting.done(), "admitted before the refill"
    gov.advance(1)
    permit = await asyncio.wait_for(waiting, 5)
    assert permit.state == "pending" and depth(gov) == 0
    permit.settle()


async def test_deadline_shorter_than_the_wait_is_refused_at_once(gov: llmgov.Governor) -> None:
    with pytest.raises(llmgov.DeadlineExceeded) as refused:
        await gov.acquire("p", deadline_ms=100)
    e = refused.value
    assert e.code == "deadline_exceeded" and e.waited_ms == 0 and e.retry_after_ms == 1000
    assert depth(gov) == 0


async def test_a_full_class_queue_is_refused(gov: llmgov.Governor) -> None:
    first = asyncio.ensure_future(gov.acquire("p", klass="tight"))
    await until(lambda: depth(gov) == 1)
    with pytest.raises(llmgov.QueueFull) as full:
        await gov.acquire("p", klass="tight")
    assert full.value.code == "queue_full" and full.value.klass == "tight" and full.value.bound == 1
    first.cancel()


async def test_cancelling_a_waiter_leaves_the_queue_and_leaks_nothing(gov: llmgov.Governor) -> None:
    waiters = [asyncio.ensure_future(gov.acquire("p")) for _ in range(50)]
    await until(lambda: depth(gov) == 50)
    for waiter in waiters:
        waiter.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    await until(lambda: depth(gov) == 0)
    gov.advance(1000)
    gov.try_acquire("p").settle()  # the refill is all still there


# One request in flight at a time, on a route and through a profile.
ONE_SLOT = {
    "scopes": {"c": {"provider": True, "limits": [{"dimension": "concurrency", "amount": 1}]}},
    "profiles": {"main": {"deployments": ["c"]}},
}


def slot_in_use(gov: llmgov.Governor) -> int:
    return gov.snapshot()["scopes"][0]["limits"][0]["in_use"]


async def hold_through_reserve(gov: llmgov.Governor) -> llmgov.Permit:
    async with gov.reserve("c") as permit:
        return permit


WAITS: "dict[str, Callable[[llmgov.Governor], Awaitable[Any]]]" = {
    "acquire": lambda gov: gov.acquire("c"),
    "acquire_profile": lambda gov: gov.acquire_profile("main"),
    "async with reserve": hold_through_reserve,
}


@pytest.mark.parametrize("wait", WAITS.values(), ids=WAITS.keys())
async def test_a_task_cancelled_as_its_permit_is_granted_after_waiting_gives_it_back(wait: Any) -> None:
    """The driver resolved the acquire, then the task was cancelled before it
    resumed (`asyncio.wait_for`, `asyncio.timeout` or a TaskGroup firing in
    the loop iteration of the grant): the task never received the permit,
    which stayed pending, holding the slot, until its TTL."""
    gov = llmgov.Governor.from_dict(ONE_SLOT, clock="manual")
    held = gov.try_acquire("c")
    loop = asyncio.get_running_loop()
    driver = _wake.driver(loop)

    async def caller() -> Any:
        return await wait(gov)

    task = asyncio.ensure_future(caller())
    await until(lambda: depth(gov) == 1)

    def resolve_then_cancel() -> None:
        driver.drain()  # hands the permit to the acquire's future
        task.cancel()  # in the same loop iteration, before the task resumes

    loop.add_reader(driver.fileno(), resolve_then_cancel)
    try:
        held.cancel()  # frees the slot: the waiter is granted it, and the bell rings
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        loop.add_reader(driver.fileno(), driver.drain)
    assert slot_in_use(gov) == 0, "the permit nobody received still holds the slot"


@pytest.mark.parametrize("wait", WAITS.values(), ids=WAITS.keys())
async def test_an_acquire_admitted_at_once_returns_without_a_loop_round_trip(wait: Any) -> None:
    """As an `asyncio.Semaphore` with room: the awaiting coroutine finishes
    at its first step. Through the loop's driver, each such acquire cost a
    socket round trip and a loop iteration (10.9 µs, aiolimiter's 1.5 µs)."""
    gov = llmgov.Governor.from_dict(ONE_SLOT, clock="manual")

    async def caller() -> Any:
        return await wait(gov)

    step = caller()
    with pytest.raises(StopIteration) as done:
        step.send(None)
    permit = done.value.value
    assert isinstance(permit, llmgov.Permit) and permit.state in ("pending", "settled"), permit
    if permit.state == "pending":
        permit.cancel()
    assert slot_in_use(gov) == 0


@pytest.mark.parametrize("start", [lambda gov: gov.acquire("c"), lambda gov: gov.acquire_profile("main")], ids=["acquire", "acquire_profile"])
async def test_an_acquire_never_awaited_gives_its_permit_back_when_dropped(start: Any) -> None:
    """Admitted at the call, then dropped before the event loop resolved it:
    the permit is cancelled, not left to expire."""
    gov = llmgov.Governor.from_dict(ONE_SLOT, clock="manual")
    never_awaited = start(gov)
    assert slot_in_use(gov) == 1
    del never_awaited
    await until(lambda: slot_in_use(gov) == 0)


def test_acquire_blocking_releases_the_gil_while_parked(gov: llmgov.Governor) -> None:
    """The waiting thread is parked without the GIL: this thread runs Python
    meanwhile and moves the clock that lets it through."""
    got = {}

    def wait() -> None:
        got["permit"] = gov.acquire_blocking("p", timeout=10)

    thread = threading.Thread(target=wait)
    thread.start()
    for _ in range(5000):
        if depth(gov) == 1:
            break
        threading.Event().wait(0.001)
    assert depth(gov) == 1 and "permit" not in got
    gov.advance(1000)
    thread.join(10)
    assert not thread.is_alive() and got["permit"].state == "pending"


def test_acquire_blocking_times_out(gov: llmgov.Governor) -> None:
    with pytest.raises(llmgov.DeadlineExceeded):
        gov.acquire_blocking("p", timeout=0.05)
    assert depth(gov) == 0


def test_reserve_with_settles_or_cancels() -> None:
    gov = llmgov.Governor.from_dict(
        {"scopes": {"p": {"limits": [{"dimension": "tokens", "amount": 1000, "window": "1m"}]}}}, clock="manual"
    )
    with gov.reserve("p", input_tokens=100, max_output_tokens=50) as permit:
        permit.settle(output_tokens=10)
    with pytest.raises(RuntimeError):
        with gov.reserve("p", input_tokens=300) as failed:
            raise RuntimeError("the call failed")
    assert failed.state == "cancelled"
    with gov.reserve("p", input_tokens=200) as left:
        pass
    assert left.state == "settled"
    in_use = gov.snapshot()["scopes"][0]["limits"][0]["in_use"]
    assert in_use == 110 + 200


async def test_a_reservation_entered_twice_refuses_the_second_entry() -> None:
    """The second entry's permit replaced the first's, which stayed pending
    (reserved) until its TTL."""
    gov = llmgov.Governor.from_dict(
        {"scopes": {"p": {"limits": [{"dimension": "tokens", "amount": 1000, "window": "1m"}]}}}, clock="manual"
    )
    reserved = lambda: gov.snapshot()["scopes"][0]["limits"][0]["reserved"]  # noqa: E731
    reservation = gov.reserve("p", input_tokens=100)
    with reservation as permit:
        with pytest.raises(llmgov.InvalidRequest) as twice:
            reservation.__enter__()
        assert twice.value.field == "reservation"
        with pytest.raises(llmgov.InvalidRequest):
            await reservation.__aenter__()
        assert reserved() == 100
    assert (permit.state, reserved()) == ("settled", 0)
    with reservation as reused:  # once left, it may be entered again
        pass
    assert reused.state == "settled"


async def test_one_reservation_entered_by_two_tasks_at_once_refuses_the_second() -> None:
    """Both passed the check before either had its permit: both entered, and
    the first permit was forgotten, pending until its TTL."""
    gov = llmgov.Governor.from_dict(
        {"scopes": {"c": {"limits": [{"dimension": "concurrency", "amount": 2}]}}}, clock="manual"
    )
    reservation = gov.reserve("c")

    async def use() -> str:
        async with reservation as permit:
            await asyncio.sleep(0)
        return permit.state

    first, second = await asyncio.gather(use(), use(), return_exceptions=True)
    assert first == "settled"
    assert isinstance(second, llmgov.InvalidRequest) and second.field == "reservation", second
    assert slot_in_use(gov) == 0
    assert await use() == "settled"  # free again once left


async def test_an_entry_never_awaited_leaves_the_reservation_free() -> None:
    """`__aenter__()` called and its coroutine dropped unawaited marked the
    reservation entering for good: every later `async with` was refused."""
    gov = llmgov.Governor.from_dict(
        {"scopes": {"c": {"limits": [{"dimension": "concurrency", "amount": 1}]}}}, clock="manual"
    )
    reservation = gov.reserve("c")
    entry = reservation.__aenter__()
    entry.close()  # dropped unawaited (close() spares the "never awaited" warning)
    assert slot_in_use(gov) == 0
    async with reservation as permit:
        assert slot_in_use(gov) == 1
    assert permit.state == "settled" and slot_in_use(gov) == 0


def test_one_reservation_entered_by_two_threads_at_once_refuses_the_second(gov: llmgov.Governor) -> None:
    """The first thread waits in the queue; the second found the reservation
    borrowed (a RuntimeError) rather than entered."""
    reservation = gov.reserve("p", timeout=30)
    entered = []
    first = threading.Thread(target=lambda: entered.append(reservation.__enter__()))
    first.start()
    for _ in range(5000):
        if depth(gov) == 1:
            break
        threading.Event().wait(0.001)
    assert depth(gov) == 1
    with pytest.raises(llmgov.InvalidRequest) as twice:
        reservation.__enter__()
    assert twice.value.field == "reservation"
    gov.advance(1000)
    first.join(10)
    assert not first.is_alive() and entered[0].state == "pending"
    reservation.__exit__(None, None, None)
    assert entered[0].state == "settled"


async def test_reserve_async_with_waits_then_settles_or_cancels(gov: llmgov.Governor) -> None:
    async def use() -> str:
        async with gov.reserve("p") as permit:
            return permit.state

    task = asyncio.ensure_future(use())
    await until(lambda: depth(gov) == 1)
    gov.advance(1000)
    assert await asyncio.wait_for(task, 5) == "pending"
    gov.advance(1000)
    with pytest.raises(ValueError):
        async with gov.reserve("p") as permit:
            raise ValueError("boom")
    assert permit.state == "cancelled"


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"priority": "high"}, "priority"),
        ({"priority": 2**40}, "priority"),
        ({"deadline_ms": -5}, "deadline_ms"),
        ({"timeout": "soon"}, "timeout"),
        ({"deadlin_ms": 5}, "deadlin_ms"),
    ],
)
def test_bad_waiting_arguments(gov: llmgov.Governor, kwargs: Any, field: str) -> None:
    with pytest.raises(llmgov.InvalidRequest) as bad:
        gov.acquire_blocking("p", **kwargs)
    assert bad.value.field == field
    assert depth(gov) == 0


@pytest.mark.parametrize("timeout", [1e20, 1e300, 2.0**64])
def test_a_timeout_longer_than_a_duration_is_invalid_request(gov: llmgov.Governor, timeout: float) -> None:
    """Finite and non-negative, yet past what a Duration holds (2^64 s): it
    was a PanicException (`cannot convert float seconds to Duration`)."""
    for wait in (
        lambda: gov.acquire_blocking("p", 1, timeout=timeout),
        lambda: gov.reserve("p", 1, timeout=timeout).__enter__(),
    ):
        with pytest.raises(llmgov.InvalidRequest) as bad:
            wait()
        assert (bad.value.field, bad.value.value) == ("timeout", repr(timeout))
    assert depth(gov) == 0
    gov.advance(1000)  # the next second's request
    with gov.reserve("p", 1, timeout=1e9) as permit:  # long, but a Duration
        assert permit.state == "pending"


EXIT_RIGHT_AFTER_ASYNC_WAITS = """
import asyncio, llmgov
gov = llmgov.Governor.from_dict({"scopes": {"p": {"limits": [{"dimension": "requests", "amount": 200, "window": "200ms"}]}}})
async def one():
    permit = await gov.acquire("p", deadline_ms=10000)
    permit.settle()
async def main():
    await asyncio.gather(*(one() for _ in range(600)))
asyncio.run(main())
print("ok")
"""


def test_the_interpreter_exits_cleanly_right_after_async_waits() -> None:
    # Waiters are woken by the governor's timer thread; the wake-up reaches
    # asyncio through a socket, so no thread outside Python takes the GIL
    # and exit never races one (before, about 1 run in 4 aborted at exit).
    import subprocess
    import sys

    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", EXIT_RIGHT_AFTER_ASYNC_WAITS], capture_output=True, text=True)
        assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_after_the_timer_started_waits_and_drops_the_governor(tmp_path: Any) -> None:
    """A process forked from one whose governor has made a request wait
    (gunicorn --preload, multiprocessing with fork) inherits no timer thread,
    only its handle and a condition variable that still queues the parent's
    thread: no timer was started for the child's waiters, the first wake-up
    handed the timer's lock to the missing thread (a deadlock), and dropping
    the governor panicked joining it."""
    gov = llmgov.Governor.from_dict(CONFIG, clock="manual")
    gov.try_acquire("p").settle()

    def wait_for_a_refill() -> None:
        waiter = threading.Thread(target=lambda: gov.acquire_blocking("p", timeout=30).settle())
        waiter.start()
        for _ in range(5000):
            if depth(gov) == 1:
                break
            threading.Event().wait(0.001)
        gov.advance(1000)
        waiter.join()

    wait_for_a_refill()  # the parent's timer thread starts, then parks
    stderr = tmp_path / "child-stderr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads: the case under test
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.dup2(os.open(stderr, os.O_WRONLY | os.O_CREAT), 2)
            wait_for_a_refill()  # starts the child's own timer
            del gov
            gc.collect()
            code = 0
        finally:
            os._exit(code)
    for _ in range(1200):  # a deadlocked child fails the test after a minute
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        threading.Event().wait(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child deadlocked")
    errors = stderr.read_text()
    assert os.waitstatus_to_exitcode(status) == 0, errors
    assert "panicked" not in errors, errors
    wait_for_a_refill()  # the parent's timer is untouched


# A blocking wait in the main thread, interrupted by SIGINT once it is queued
# (a helper thread watches the queue and says so), then what it held.
INTERRUPTED_WAIT = """
import sys, threading, llmgov
gov = llmgov.Governor.from_dict({config!r}, clock="manual")
held = gov.try_acquire("c")

def say_when_queued():
    while gov.queue_metrics()["depth"] == 0:
        threading.Event().wait(0.001)
    print("queued", flush=True)

threading.Thread(target=say_when_queued, daemon=True).start()
try:
    {wait}
except KeyboardInterrupt:
    held.cancel()
    print("interrupted", gov.queue_metrics()["depth"], gov.snapshot()["scopes"][0]["limits"][0]["in_use"], flush=True)
"""


@pytest.mark.parametrize(
    "wait",
    [
        'gov.acquire_blocking("c")',
        'gov.acquire_blocking("c", timeout=3600)',
        'gov.acquire_profile_blocking("main")',
        'gov.reserve("c").__enter__()',
    ],
)
def test_ctrl_c_interrupts_a_blocking_wait_which_leaves_the_queue(wait: str) -> None:
    """The thread was parked in the core until admitted or timed out, so
    Ctrl-C waited for that (forever, without a timeout)."""
    script = INTERRUPTED_WAIT.format(config=ONE_SLOT, wait=wait)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "queued"
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
            pytest.fail(f"{wait} ignored SIGINT for a minute")
    # Out of the queue, and nothing held once the other permit was cancelled.
    assert out.split() == ["interrupted", "0", "0"], out
