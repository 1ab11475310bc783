"""Issue 11 from Python, on the manual clock: acquiring by model profile
(the roomiest deployment, failover, open breakers skipped, fallback only
where the class may) and the event hook (denials and breaker changes as
dicts, from any thread; a hook that raises never harms the governor). Cost
budgets are in test_cost.py, metrics and Prometheus in test_metrics.py."""

from __future__ import annotations

import sys
import threading
from typing import Any, Dict, List

import pytest

import llmgov


def limits(rpm: int, tpm: int) -> List[Dict[str, Any]]:
    return [
        {"dimension": "requests", "amount": rpm, "window": "1m"},
        {"dimension": "tokens", "amount": tpm, "window": "1m"},
    ]


ROUTED = {
    "adaptive": {"breaker": {"failures": 1, "pauses": ["30s"]}},
    "scopes": {
        # Two keys of one OpenAI organisation share its pool.
        "openai/org": {"provider": True, "limits": limits(100, 10000)},
        "openai/org/key-1": {"provider": True, "limits": limits(100, 10000)},
        "openai/org/key-2": {"provider": True, "limits": limits(100, 10000)},
        "azure/eastus": {"provider": True, "limits": limits(100, 8000)},
        "mini/org": {"provider": True, "limits": limits(100, 100000)},
        "tenants/*": {"limits": [{"dimension": "tokens", "amount": 1000000, "window": "1m"}]},
    },
    "profiles": {
        "gpt-4o": {
            "deployments": ["openai/org/key-1", "openai/org/key-2", "azure/eastus"],
            "fallback": "mini",
            "fallback_allowed": {"eval": False},
        },
        "mini": {"deployments": ["mini/org"]},
    },
}


@pytest.fixture
def gov() -> llmgov.Governor:
    return llmgov.Governor.from_dict(ROUTED, clock="manual")


# --- routing ------------------------------------------------------------------


def test_the_roomiest_deployment_is_chosen_and_keys_share_their_org_pool(gov: llmgov.Governor) -> None:
    first = gov.try_acquire_profile("gpt-4o", 6000, paths="tenants/acme")
    assert (first.profile, first.deployment, first.fell_back, first.degraded) == ("gpt-4o", "openai/org/key-1", False, False)
    # The org pool is 60% used, so key-2 (same org) has as little room;
    # Azure, untouched, has the most.
    second = gov.try_acquire_profile("gpt-4o", 1000, paths="tenants/acme")
    assert second.deployment == "azure/eastus"
    assert gov.try_acquire_profile("gpt-4o", 1000, paths="tenants/acme").deployment == "azure/eastus"
    # A plain permit says nothing of routing.
    plain = gov.try_acquire(["tenants/acme", "mini/org"], 10)
    assert (plain.profile, plain.deployment, plain.fell_back) == (None, None, False)


def test_a_refused_deployment_fails_over_and_an_open_breaker_is_skipped(gov: llmgov.Governor) -> None:
    profile = gov.profile("gpt-4o", ["tenants/acme"])
    assert (profile.name, profile.paths) == ("gpt-4o", ["tenants/acme"])
    assert gov.profile("gpt-4o", ["tenants/acme"]) is profile, "resolved once, then cached"
    assert gov.try_acquire_profile(profile, 7000).deployment == "openai/org/key-1"
    assert gov.try_acquire_profile(profile, 7000).deployment == "azure/eastus", "the org pool cannot take 7000 more"

    fresh = llmgov.Governor.from_dict(ROUTED, clock="manual")
    probe = fresh.try_acquire_profile("gpt-4o", paths=["tenants/acme"])
    assert probe.deployment == "openai/org/key-1"
    probe.report(503)  # one failure opens key-1's breaker (and the org's)
    probe.settle()
    assert fresh.try_acquire_profile("gpt-4o", paths=["tenants/acme"]).deployment == "azure/eastus"


def test_fallback_follows_the_chain_only_where_the_class_allows(gov: llmgov.Governor) -> None:
    assert gov.try_acquire_profile("gpt-4o", 9000, paths="tenants/acme").deployment == "openai/org/key-1"
    with pytest.raises(llmgov.RateLimited) as refused:
        gov.try_acquire_profile("gpt-4o", 9000, paths="tenants/acme", klass="eval")
    assert (refused.value.scope, refused.value.dimension) == ("openai/org", "tokens"), "refused with the reason"
    routed = gov.try_acquire_profile("gpt-4o", 9000, paths="tenants/acme", klass="batch")
    assert (routed.profile, routed.deployment, routed.fell_back) == ("mini", "mini/org", True)
    routed.settle(9000, 10)
    assert routed.state == "settled"


def test_profile_bad_input_gets_the_named_exception(gov: llmgov.Governor) -> None:
    with pytest.raises(llmgov.InvalidRequest) as unknown:
        gov.try_acquire_profile("nope")
    assert unknown.value.field == "profile" and "gpt-4o" in str(unknown.value)
    with pytest.raises(llmgov.InvalidRequest) as wrong_type:
        gov.try_acquire_profile(42)
    assert wrong_type.value.field == "profile"
    with pytest.raises(llmgov.InvalidRequest) as both:
        gov.try_acquire_profile(gov.profile("gpt-4o"), paths="tenants/acme")
    assert both.value.field == "paths"
    with pytest.raises(llmgov.InvalidRequest) as extra:
        gov.try_acquire_profile("gpt-4o", route="x")
    assert extra.value.field == "route"


# --- the event hook -------------------------------------------------------------


BREAKER = {
    "adaptive": {"breaker": {"failures": 2, "pauses": ["10s"]}},
    "scopes": {"openai/org": {"provider": True, "limits": [{"dimension": "tokens", "amount": 600, "window": "1m"}]}},
}


def test_denials_rejections_and_breaker_changes_reach_the_hook() -> None:
    gov = llmgov.Governor.from_dict(BREAKER, clock="manual")
    events: List[Dict[str, Any]] = []
    gov.set_event_hook(events.append)
    permit = gov.try_acquire("openai/org", 500)
    with pytest.raises(llmgov.RateLimited):
        gov.try_acquire("openai/org", 200, klass="batch")
    permit.report(429, {"retry-after": "1"}, b'{"error":{"type":"tokens","code":"rate_limit_exceeded"}}')
    permit.report(503, {"retry-after": "1"})
    gov.advance(10_000)
    probe = gov.try_acquire("openai/org")
    probe.report(200, {}, b"{}")

    assert events[0] == {
        "event": "denied",
        "code": "rate_limited",
        "scope": "openai/org",
        "dimension": "tokens",
        "retry_after_ms": 10_000,
        "class": "batch",
    }
    assert events[1] == {
        "event": "provider_rejected",
        "scopes": ["openai/org"],
        "kind": "rate_limited",
        "dimension": "tokens",
        "retry_after_ms": 1000,
    }
    assert events[2]["event"] == "provider_rejected" and events[2]["kind"] == "overloaded"
    assert events[3] == {"event": "breaker_changed", "scope": "openai/org", "state": "open"}
    assert events[4] == {"event": "breaker_changed", "scope": "openai/org", "state": "closed"}
    assert len(events) == 5, events


def test_a_denial_on_a_thread_without_the_gil_reaches_the_hook() -> None:
    # acquire_blocking waits with the GIL released; its refusal is told on
    # that thread, which must take the GIL itself to call the hook.
    gov = llmgov.Governor.from_dict(
        {
            "classes": {"batch": {"queue_bound": 1}},
            "scopes": {"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1h"}]}},
        },
        clock="manual",
    )
    seen: List[Dict[str, Any]] = []
    threads: List[str] = []

    def hook(event: Dict[str, Any]) -> None:
        threads.append(threading.current_thread().name)
        seen.append(event)

    gov.set_event_hook(hook)
    held = gov.try_acquire("p", klass="batch")
    outcome: List[BaseException] = []

    def wait() -> None:
        try:
            gov.acquire_blocking("p", klass="batch", timeout=0)
        except llmgov.Error as error:
            outcome.append(error)

    worker = threading.Thread(target=wait, name="waiter")
    worker.start()
    worker.join()
    assert isinstance(outcome[0], llmgov.DeadlineExceeded)
    assert seen[-1]["event"] == "denied" and seen[-1]["code"] == "deadline_exceeded", seen
    assert threads[-1] == "waiter"
    held.cancel()


def test_a_hook_that_raises_never_harms_the_governor(monkeypatch: pytest.MonkeyPatch) -> None:
    gov = llmgov.Governor.from_dict(BREAKER, clock="manual")
    unraisable: List[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    calls: List[str] = []

    def broken(event: Dict[str, Any]) -> None:
        calls.append(event["event"])
        raise ValueError("the hook is broken")

    gov.set_event_hook(broken)
    permit = gov.try_acquire("openai/org", 500)
    with pytest.raises(llmgov.RateLimited):  # the denial, not the hook's error
        gov.try_acquire("openai/org", 200)
    permit.report(503)
    permit.settle(500, 0)
    assert calls == ["denied", "provider_rejected"]
    assert [type(u.exc_value) for u in unraisable] == [ValueError, ValueError]
    assert unraisable[0].object is broken
    # The governor goes on: the next request is admitted and settles.
    gov.try_acquire("openai/org", 50).settle(50, 0)

    # Replaced, then removed.
    events: List[Dict[str, Any]] = []
    gov.set_event_hook(events.append)
    with pytest.raises(llmgov.RateLimited):
        gov.try_acquire("openai/org", 600)
    assert [e["event"] for e in events] == ["denied"]
    gov.set_event_hook(None)
    with pytest.raises(llmgov.RateLimited):
        gov.try_acquire("openai/org", 600)
    assert len(events) == 1
    with pytest.raises(llmgov.InvalidRequest) as not_callable:
        gov.set_event_hook(42)
    assert not_callable.value.field == "hook"


def test_a_hook_closing_over_its_governor_is_collected() -> None:
    import gc
    import weakref

    class Sentinel:
        pass

    gov = llmgov.Governor.from_dict(BREAKER, clock="manual")
    sentinel = Sentinel()

    def hook(event: Dict[str, Any], gov: llmgov.Governor = gov, sentinel: Sentinel = sentinel) -> None:
        gov.snapshot()

    gov.set_event_hook(hook)
    gone = weakref.ref(sentinel)
    del gov, sentinel, hook
    gc.collect()
    assert gone() is None, "the governor -> hook -> governor cycle was not collected"


def test_the_routing_example_runs_and_is_in_the_readme(capsys: pytest.CaptureFixture[str]) -> None:
    import runpy
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    runpy.run_path(str(root / "examples" / "routing.py"), run_name="__main__")
    printed = capsys.readouterr().out
    assert "went to openai/org" in printed and "then to azure/eastus" in printed
    assert "'state': 'open'" in printed and "45.0 requests/min, tpm binds" in printed
    example = (root / "examples" / "routing.py").read_text().split('"""', 2)[2].lstrip("\n")
    assert example in (root / "README.md").read_text()
