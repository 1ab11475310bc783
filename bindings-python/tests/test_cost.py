"""Cost budgets from Python, on the manual clock: a pricing table per model,
a `cost` limit with a budget reserved from the estimate and settled with the
usage, thresholds that degrade to a cheaper profile and then refuse, and a
budget spent by threads at once (mirrors core/tests/cost.rs)."""

from __future__ import annotations

import sys
import threading
from typing import Any, Dict, Iterator, List

import pytest

import llmgov


def test_a_cost_budget_refuses_with_dimension_cost() -> None:
    gov = llmgov.Governor.from_dict(
        {
            "pricing": {"gpt-4o": {"input": 2.5, "cached_input": 1.25, "output": 10.0}},
            "scopes": {
                "openai/gpt-4o": {"pricing": "gpt-4o", "limits": [{"dimension": "requests", "amount": 1000, "window": "1m"}]},
                # 0.05 a day, counted in millionths: 50000.
                "tenants/*": {"limits": [{"dimension": "cost", "budget": 0.05, "window": "1d"}]},
            },
        },
        clock="manual",
    )
    route = ["tenants/acme", "openai/gpt-4o"]
    permit = gov.try_acquire(route, 4000, 1000)  # 10000 + 10000 millionths reserved
    permit.settle(4000, 200)  # 10000 + 2000 charged
    gov.try_acquire(route, 10000, 1000)  # 25000 + 10000 more: 47000 of 50000
    with pytest.raises(llmgov.RateLimited) as refused:
        gov.try_acquire(route, 1000, 200)  # 2500 + 2000 more would be 51500
    assert (refused.value.scope, refused.value.dimension) == ("tenants/acme", "cost")
    with pytest.raises(llmgov.NeverFits) as never:
        gov.try_acquire(["tenants/beta", "openai/gpt-4o"], 30000)
    assert never.value.dimension == "cost"


def test_budget_thresholds_degrade_to_the_cheaper_profile_then_refuse() -> None:
    requests = [{"dimension": "requests", "amount": 10000, "window": "1m"}]
    gov = llmgov.Governor.from_dict(
        {
            "pricing": {"gpt-4o": {"input": 2.5, "output": 10.0}, "mini": {"input": 0.15, "output": 0.6}},
            "scopes": {
                "openai/gpt-4o": {"provider": True, "pricing": "gpt-4o", "limits": requests},
                "openai/mini": {"provider": True, "pricing": "mini", "limits": requests},
                "tenants/*": {"limits": [{"dimension": "cost", "budget": 1.0, "window": "1d"}]},
            },
            "profiles": {
                "gpt-4o": {
                    "deployments": ["openai/gpt-4o"],
                    "budget": {"degrade_at": 0.6, "degrade_to": "mini", "refuse_at": 0.85},
                    "fallback_allowed": {"eval": False},
                },
                "mini": {"deployments": ["openai/mini"]},
            },
        },
        clock="manual",
    )
    profile = gov.profile("gpt-4o", "tenants/acme")
    for _ in range(3):  # 0.25 each on gpt-4o
        assert gov.try_acquire_profile(profile, 100_000).profile == "gpt-4o"
    cheap = gov.try_acquire_profile(profile, 100_000)  # 75% spent: past 0.6
    assert (cheap.profile, cheap.deployment, cheap.degraded, cheap.fell_back) == ("mini", "openai/mini", True, False)
    with pytest.raises(llmgov.RateLimited) as kept:  # a class that may not leave its profile
        gov.try_acquire_profile(profile, 100_000, klass="eval")
    assert (kept.value.scope, kept.value.dimension) == ("tenants/acme", "cost")
    for _ in range(6):  # 0.015 each on mini, up to 85.5%
        gov.try_acquire_profile(profile, 100_000)
    with pytest.raises(llmgov.RateLimited) as refused:
        gov.try_acquire_profile(profile, 100_000)
    retry_after = refused.value.retry_after
    assert refused.value.dimension == "cost" and retry_after is not None and retry_after > 24 * 3600


# --- a budget spent by threads at once -------------------------------------------

BUDGET = 500_000  # 0.5 a day, in millionths
ESTIMATE = 7_500  # 1000 input at 2.5 + 500 max output at 10, per 1M
MOST_OVER = 4_000  # 900 output where 500 were reserved: 400 more at 10 per 1M
THREADS = 8


@pytest.fixture
def switching_often() -> Iterator[None]:
    """Threads switch every microsecond, so their permits interleave."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def cost_limit(gov: llmgov.Governor, scope: str) -> Dict[str, Any]:
    """`scope`'s cost limit in the snapshot: `used` is what settled requests
    were charged (the clock never moves, so nothing ages out), `reserved`
    what permits in flight hold."""
    (scope_snapshot,) = [s for s in gov.snapshot()["scopes"] if s["path"] == scope]
    (cost,) = [limit for limit in scope_snapshot["limits"] if limit["dimension"] == "cost"]
    return cost


def test_threads_spending_one_budget_overspend_by_at_most_the_overages_in_flight(switching_often: None) -> None:
    gov = llmgov.Governor.from_dict(
        {
            "pricing": {"gpt-4o": {"input": 2.5, "cached_input": 1.25, "output": 10.0}},
            "scopes": {
                "openai/gpt-4o": {
                    "provider": True,
                    "pricing": "gpt-4o",
                    "limits": [{"dimension": "requests", "amount": 10000, "window": "1m"}],
                },
                "tenants/*": {"limits": [{"dimension": "cost", "budget": 0.5, "window": "1d", "slots": 24}]},
            },
        },
        clock="manual",
    )
    route = gov.route(["tenants/acme", "openai/gpt-4o"])
    start = threading.Barrier(THREADS)
    charged: List[int] = []  # what each settle should have charged (list.append is atomic)
    overspent_then_admitted: List[int] = []
    failures: List[BaseException] = []
    # Requests that may be in flight at once: counted from before the
    # acquire to after its settle, so never fewer than there really are.
    in_flight = {"now": 0, "most": 0}
    counting = threading.Lock()

    def count(change: int) -> None:
        with counting:
            in_flight["now"] += change
            in_flight["most"] = max(in_flight["most"], in_flight["now"])

    def spend(t: int) -> None:
        try:
            start.wait()
            for i in range(300):
                count(+1)
                try:
                    permit = gov.try_acquire(route, 1000, 500)
                except llmgov.RateLimited as refused:
                    count(-1)
                    assert (refused.scope, refused.dimension) == ("tenants/acme", "cost")
                    continue
                # One request in three runs over its reservation (600..900 output).
                output = 600 + (t * 31 + i * 17) % 301 if (t + i) % 3 == 0 else 100 + i % 401
                permit.settle(1000, output)
                count(-1)
                charged.append(2_500 + output * 10)
                if cost_limit(gov, "tenants/acme")["used"] >= BUDGET:
                    # Spent by settled requests, which nothing gives back:
                    # from here on nothing may be admitted.
                    try:
                        gov.try_acquire(route, 1000, 500).cancel()
                        overspent_then_admitted.append(t)
                    except llmgov.RateLimited:
                        pass
        except BaseException as error:  # reported on the main thread
            failures.append(error)

    workers = [threading.Thread(target=spend, args=(t,)) for t in range(THREADS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not failures, failures

    cost = cost_limit(gov, "tenants/acme")
    spent = cost["used"]
    assert cost["reserved"] == 0 and cost["in_use"] == spent == sum(charged), "it holds exactly the settled costs"
    # The last admission left the budget covering the estimates then in
    # flight; each of those settled at most one overage past its estimate.
    # No request is admitted past that, so the overspend is at most one
    # overage per request in flight at once (one per thread at most).
    most = in_flight["most"]
    assert 1 <= most <= THREADS
    assert spent <= BUDGET + most * MOST_OVER, f"spent {spent} of {BUDGET} with {most} in flight at most"
    # A refusal left less than one estimate free, plus what the other
    # threads' permits then in flight gave back (4000 at most each).
    assert spent > BUDGET - ESTIMATE - (THREADS - 1) * 4_000, f"refused while an estimate still fitted: {spent}"
    assert not overspent_then_admitted, "admitted after the budget was spent"
    with pytest.raises(llmgov.RateLimited) as refused:
        gov.try_acquire(route, 1000, 500)
    assert (refused.value.scope, refused.value.dimension) == ("tenants/acme", "cost")
    # The budget is a day's: refused until the charges age out of the
    # window, as the refusal said, then admitted again.
    retry_after_ms = refused.value.retry_after_ms
    assert retry_after_ms is not None and retry_after_ms >= 24 * 3600 * 1000
    gov.advance(retry_after_ms - 1)
    with pytest.raises(llmgov.RateLimited):
        gov.try_acquire(route, 1000, 500)
    gov.advance(1)
    gov.try_acquire(route, 1000, 500).settle(1000, 100)
