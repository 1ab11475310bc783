"""Waiting for admission by model profile from Python, on the manual clock
(issue 11; the core's tests/routing_wait.rs): `await gov.acquire_profile`
and `gov.acquire_profile_blocking` queue on the deployment that passes first
among those the request's class may use, refuse at once what can never pass
or cannot pass within its deadline, and refuse, holding nothing, when a
budget threshold was crossed while the request waited."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Dict, List

import pytest
from conftest import until

import llmgov


def pace(secs: int) -> Dict[str, Any]:
    """A provider deployment taking one request per `secs` seconds."""
    return {
        "provider": True,
        "limits": [
            {"dimension": "requests", "amount": 1, "window": f"{secs}s"},
            {"dimension": "tokens", "amount": 10000, "window": "1m"},
        ],
    }


THREE_PACES = {
    "scopes": {"a/org": pace(10), "b/org": pace(5), "c/org": pace(2)},
    "profiles": {
        "main": {"deployments": ["a/org", "b/org"], "fallback": "spare", "fallback_allowed": {"eval": False}},
        "spare": {"deployments": ["c/org"]},
    },
}


@pytest.fixture
def gov() -> llmgov.Governor:
    return llmgov.Governor.from_dict(THREE_PACES, clock="manual")


def take_all(gov: llmgov.Governor) -> List[str]:
    """Takes the one request each deployment has now; where each went."""
    return [gov.try_acquire_profile("main", 10).deployment or "" for _ in range(3)]


def depth(gov: llmgov.Governor) -> int:
    return gov.queue_metrics()["depth"]


def in_use(gov: llmgov.Governor, path: str, dimension: str) -> int:
    scope = next(s for s in gov.snapshot()["scopes"] if s["path"] == path)
    return next(limit["in_use"] for limit in scope["limits"] if limit["dimension"] == dimension)


async def settled(future: "asyncio.Future[Any]") -> bool:
    """Whether `future` is done once the loop has had time to poll it."""
    await asyncio.sleep(0.02)
    return future.done()


# --- where a waiter queues ----------------------------------------------------


async def test_admitted_at_once_says_where_it_went(gov: llmgov.Governor) -> None:
    permit = await gov.acquire_profile("main", 10)
    assert (permit.profile, permit.deployment, permit.fell_back, permit.degraded) == ("main", "a/org", False, False)
    assert permit.state == "pending" and depth(gov) == 0
    permit.settle()


async def test_a_waiter_queues_on_the_deployment_that_passes_first_its_class_may_use(gov: llmgov.Governor) -> None:
    assert take_all(gov) == ["a/org", "b/org", "c/org"]
    profile = gov.profile("main")
    # Every deployment is busy: the fallback frees first (2 s).
    anyone = asyncio.ensure_future(gov.acquire_profile(profile, 10))
    # A class that may not fall back waits on its own profile's soonest: b (5 s), not a (10 s).
    own = asyncio.ensure_future(gov.acquire_profile(profile, 10, klass="eval"))
    await until(lambda: depth(gov) == 2)

    gov.advance(1999)
    assert not await settled(anyone), "admitted before c refilled"
    gov.advance(1)
    routed = await asyncio.wait_for(anyone, 5)
    assert (routed.profile, routed.deployment, routed.fell_back) == ("spare", "c/org", True)
    assert not await settled(own), "eval never leaves its profile"

    gov.advance(3000)
    routed = await asyncio.wait_for(own, 5)
    assert (routed.profile, routed.deployment, routed.fell_back) == ("main", "b/org", False)
    assert routed.state == "pending" and depth(gov) == 0
    routed.settle()


def test_the_blocking_waiter_queues_there_too_with_the_gil_released(gov: llmgov.Governor) -> None:
    """The waiting thread is parked without the GIL: this thread runs
    Python meanwhile and moves the clock that lets it through."""
    take_all(gov)
    got: Dict[str, Any] = {}

    def wait() -> None:
        got["eval"] = gov.acquire_profile_blocking("main", 10, klass="eval", timeout=10)

    thread = threading.Thread(target=wait)
    thread.start()
    for _ in range(5000):
        if depth(gov) == 1:
            break
        threading.Event().wait(0.001)
    assert depth(gov) == 1 and "eval" not in got
    gov.advance(2000)  # c refills, but eval may not fall back
    thread.join(0.05)
    assert thread.is_alive() and "eval" not in got
    gov.advance(3000)
    thread.join(10)
    assert not thread.is_alive()
    assert (got["eval"].deployment, got["eval"].fell_back) == ("b/org", False)


# --- refused at once ----------------------------------------------------------


async def test_what_can_never_pass_is_refused_at_once(gov: llmgov.Governor) -> None:
    with pytest.raises(llmgov.NeverFits) as blocking:
        gov.acquire_profile_blocking("main", 20000)
    assert (blocking.value.code, blocking.value.dimension) == ("never_fits", "tokens")
    with pytest.raises(llmgov.NeverFits) as awaited:
        await gov.acquire_profile("main", 20000)
    assert awaited.value.dimension == "tokens"
    assert gov.snapshot()["never_fits"] == 2 and depth(gov) == 0


async def test_a_deadline_shorter_than_the_soonest_deployment_is_refused(gov: llmgov.Governor) -> None:
    take_all(gov)
    # The soonest deployment passes in 2 s: a 1 s deadline cannot be met.
    with pytest.raises(llmgov.DeadlineExceeded) as blocking:
        gov.acquire_profile_blocking("main", 10, deadline_ms=1000)
    assert blocking.value.code == "deadline_exceeded" and blocking.value.retry_after_ms == 2000
    with pytest.raises(llmgov.DeadlineExceeded) as awaited:
        await gov.acquire_profile("main", 10, deadline_ms=1000)
    assert awaited.value.retry_after_ms == 2000
    assert depth(gov) == 0


def test_the_blocking_timeout_refuses_and_leaves_the_queue(gov: llmgov.Governor) -> None:
    take_all(gov)
    with pytest.raises(llmgov.DeadlineExceeded):
        gov.acquire_profile_blocking("main", 10, timeout=0.05)
    assert depth(gov) == 0
    gov.advance(2000)
    assert gov.try_acquire_profile("main", 10).deployment == "c/org", "the refill is all still there"


# --- a budget threshold crossed while waiting --------------------------------

BUDGETED = {
    "pricing": {"gpt-4o": {"input": 2.5, "output": 10.0}},
    "scopes": {
        "openai/gpt-4o": {
            "provider": True,
            "pricing": "gpt-4o",
            "limits": [{"dimension": "tokens", "amount": 150000, "window": "1m"}],
        },
        "tenants/*": {"limits": [{"dimension": "cost", "budget": 1.0, "window": "1d"}]},
    },
    "profiles": {"gpt-4o": {"deployments": ["openai/gpt-4o"], "budget": {"refuse_at": 0.3}}},
}


def cross_the_threshold(gov: llmgov.Governor) -> None:
    """A request straight on the route takes the tenant's spend to 0.35,
    past the profile's 0.3, and 40k tokens more: the waiter's 100k needs
    36 s of refill."""
    gov.try_acquire(["tenants/acme", "openai/gpt-4o"], 40000)


async def test_a_budget_threshold_crossed_while_waiting_refuses_and_holds_nothing() -> None:
    gov = llmgov.Governor.from_dict(BUDGETED, clock="manual")
    events: List[Dict[str, Any]] = []
    gov.set_event_hook(events.append)
    profile = gov.profile("gpt-4o", paths="tenants/acme")
    gov.try_acquire_profile(profile, 100000)  # 0.25 of the budget
    waiting = asyncio.ensure_future(gov.acquire_profile(profile, 100000))
    await until(lambda: depth(gov) == 1)  # 50k tokens left of 150k a minute
    cross_the_threshold(gov)
    gov.advance(35000)
    assert not await settled(waiting)
    gov.advance(1000)
    with pytest.raises(llmgov.RateLimited) as refused:
        await asyncio.wait_for(waiting, 5)
    assert (refused.value.dimension, refused.value.scope) == ("cost", "tenants/acme")
    assert in_use(gov, "tenants/acme", "cost") == 350000, "the waiter's permit was cancelled"
    # 140k taken, 90k refilled in 36 s; the waiter's 100k would make it 150k.
    assert in_use(gov, "openai/gpt-4o", "tokens") == 50000
    assert any(e["event"] == "denied" and e["dimension"] == "cost" for e in events)


def test_the_blocking_waiter_is_refused_by_the_threshold_too() -> None:
    gov = llmgov.Governor.from_dict(BUDGETED, clock="manual")
    gov.try_acquire_profile("gpt-4o", 100000, paths="tenants/acme")
    got: Dict[str, Any] = {}

    def wait() -> None:
        try:
            gov.acquire_profile_blocking("gpt-4o", 100000, paths="tenants/acme", timeout=60)
        except llmgov.Error as error:
            got["error"] = error

    thread = threading.Thread(target=wait)
    thread.start()
    for _ in range(5000):
        if depth(gov) == 1:
            break
        threading.Event().wait(0.001)
    assert depth(gov) == 1
    cross_the_threshold(gov)
    gov.advance(36000)
    thread.join(10)
    assert not thread.is_alive()
    assert isinstance(got["error"], llmgov.RateLimited) and got["error"].dimension == "cost"
    assert in_use(gov, "tenants/acme", "cost") == 350000 and in_use(gov, "openai/gpt-4o", "tokens") == 50000


# --- leaving ------------------------------------------------------------------


async def test_cancelling_a_waiter_leaves_the_queue(gov: llmgov.Governor) -> None:
    take_all(gov)
    waiters = [asyncio.ensure_future(gov.acquire_profile("main", 10)) for _ in range(20)]
    await until(lambda: depth(gov) == 20)
    for waiter in waiters:
        waiter.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    await until(lambda: depth(gov) == 0)
    gov.advance(2000)
    assert gov.try_acquire_profile("main", 10).deployment == "c/org", "the refill is all still there"


@pytest.mark.parametrize("by_profile", [True, False], ids=["acquire_profile", "acquire"])
async def test_a_waiter_cancelled_before_the_loop_polls_it_holds_nothing(gov: llmgov.Governor, by_profile: bool) -> None:
    """Admitted at once, then cancelled before the event loop resolved it:
    the permit is cancelled, not left to expire."""
    waiting = asyncio.ensure_future(gov.acquire_profile("main", 10) if by_profile else gov.acquire("a/org", 10))
    waiting.cancel()
    await asyncio.sleep(0.02)
    assert in_use(gov, "a/org", "requests") == 0 and in_use(gov, "a/org", "tokens") == 0


# --- bad input ----------------------------------------------------------------


@pytest.mark.parametrize(
    "call,field",
    [
        (lambda gov: gov.acquire_profile("nope"), "profile"),
        (lambda gov: gov.acquire_profile(42), "profile"),
        (lambda gov: gov.acquire_profile(gov.profile("main"), paths="tenants/acme"), "paths"),
        (lambda gov: gov.acquire_profile("main", priority="high"), "priority"),
        (lambda gov: gov.acquire_profile("main", deadline_ms=-5), "deadline_ms"),
        (lambda gov: gov.acquire_profile("main", route="x"), "route"),
        (lambda gov: gov.acquire_profile_blocking("main", timeout="soon"), "timeout"),
        (lambda gov: gov.acquire_profile_blocking("main", input_tokens=-1), "input_tokens"),
        (lambda gov: gov.acquire_profile_blocking("main", deadlin_ms=5), "deadlin_ms"),
    ],
)
async def test_bad_arguments_name_the_field(gov: llmgov.Governor, call: Callable[[Any], Any], field: str) -> None:
    with pytest.raises(llmgov.InvalidRequest) as bad:
        call(gov)
    assert bad.value.field == field
    assert depth(gov) == 0 and gov.snapshot()["admitted"] == 0


def test_a_timeout_longer_than_a_duration_is_invalid_request(gov: llmgov.Governor) -> None:
    with pytest.raises(llmgov.InvalidRequest) as bad:
        gov.acquire_profile_blocking("main", 10, timeout=1e300)
    assert (bad.value.field, bad.value.value) == ("timeout", "1e+300")
    assert depth(gov) == 0
