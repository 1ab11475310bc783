"""Replays every conformance scenario in `tests/scenarios/` through the
Python API (format: `tests/scenarios/README.md`; reference runner
`core/tests/scenarios.rs`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import pytest

import llmgov

SCENARIOS = Path(__file__).resolve().parents[2] / "tests" / "scenarios"
FILES = sorted(SCENARIOS.glob("*.json"))
MIN_SCENARIOS = 15

DIMENSIONS = {"requests", "input_tokens", "output_tokens", "tokens", "concurrency", "cost"}
EXPECT_FIELDS = {"outcome", "code", "scope", "dimension", "retry_after_ms"}
# Every op's fields: name -> (required, type check).
INT = (int,)
FIELDS: Dict[str, Dict[str, Any]] = {
    "advance": {"ms": (True, INT)},
    "acquire": {
        "permit": (False, (str,)),
        "paths": (True, (list,)),
        "input_tokens": (False, INT),
        "cached_input_tokens": (False, INT),
        "max_output_tokens": (False, INT),
        "expected_output_tokens": (False, INT),
        "expect": (True, (dict,)),
    },
    "settle": {
        "permit": (True, (str,)),
        "input_tokens": (False, INT),
        "cached_input_tokens": (False, INT),
        "output_tokens": (False, INT),
        "expect": (False, (dict,)),
    },
    "cancel": {"permit": (True, (str,)), "expect": (False, (dict,))},
    "add_output": {"permit": (True, (str,)), "tokens": (True, INT), "expect": (False, (dict,))},
    "expect_limit": {
        "scope": (True, (str,)),
        "dimension": (True, (str,)),
        "limit": (False, INT),
        "available": (False, INT),
        "in_use": (False, INT),
        "reserved": (False, INT),
        "used": (False, INT),
        "expired": (False, INT),
    },
    "expect_counters": {
        "admitted": (False, INT),
        "rate_limited": (False, INT),
        "never_fits": (False, INT),
        "expired_permits": (False, INT),
    },
}


class Malformed(Exception):
    """The scenario file breaks its format: a typo must never skip a check."""


def check_form(step: Dict[str, Any]) -> None:
    op = step.get("op")
    if op not in FIELDS:
        raise Malformed(f"unknown op {op!r}")
    schema = FIELDS[op]
    for key, value in step.items():
        if key == "op":
            continue
        if key not in schema:
            raise Malformed(f"unknown field {key!r} for op {op}")
        types = schema[key][1]
        if isinstance(value, bool) or not isinstance(value, types):
            raise Malformed(f"field {key!r} has the wrong type: {value!r}")
    for key, (required, _) in schema.items():
        if required and key not in step:
            raise Malformed(f"op {op} needs {key!r}")
    expect = step.get("expect")
    if expect is not None:
        unknown = set(expect) - EXPECT_FIELDS
        if unknown or "outcome" not in expect:
            raise Malformed(f"bad expect {expect!r}")
        if expect["outcome"] == "error" and "code" not in expect:
            raise Malformed("an expected error must give its code")
    if op == "acquire" and step["expect"]["outcome"] == "admitted" and "permit" not in step:
        raise Malformed("an acquire expected to be admitted must name its permit")
    if op == "expect_limit" and step["dimension"] not in DIMENSIONS:
        raise Malformed(f"unknown dimension {step['dimension']!r}")


def outcome(call: Callable[[], Any], success: str) -> Dict[str, Any]:
    """A call's result in the scenario vocabulary."""
    try:
        call()
    except llmgov.RateLimited as e:
        assert e.code == "rate_limited"
        return {"outcome": "rate_limited", "scope": e.scope, "dimension": e.dimension, "retry_after_ms": e.retry_after_ms}
    except llmgov.NeverFits as e:
        assert e.code == "never_fits"
        return {"outcome": "never_fits", "scope": e.scope, "dimension": e.dimension}
    except llmgov.Error as e:
        return {"outcome": "error", "code": e.code}
    return {"outcome": success}


def covers(expected: Dict[str, Any], actual: Dict[str, Any], skip: tuple = ()) -> Optional[str]:
    for key, value in expected.items():
        if key in skip:
            continue
        if key not in actual or actual[key] != value:
            return f"expected {key}={value!r}, got {actual.get(key, '<absent>')!r} (actual {actual})"
    return None


class Run:
    def __init__(self, config: Dict[str, Any]) -> None:
        self.gov = llmgov.Governor.from_dict(config, clock="manual")
        self.permits: Dict[str, llmgov.Permit] = {}

    def named(self, name: str) -> llmgov.Permit:
        if name not in self.permits:
            raise Malformed(f"no admitted permit named {name!r}")
        return self.permits[name]

    def step(self, step: Dict[str, Any]) -> Optional[str]:
        op = step["op"]
        expected = step.get("expect", {"outcome": "ok"})
        if op == "advance":
            self.gov.advance(step["ms"])
            return None
        if op == "acquire":
            name = step.get("permit")
            if name is not None and name in self.permits:
                raise Malformed(f"permit name {name!r} is used twice")
            got = {}

            def acquire() -> None:
                got["permit"] = self.gov.try_acquire(
                    step["paths"],
                    input_tokens=step.get("input_tokens", 0),
                    cached_input_tokens=step.get("cached_input_tokens", 0),
                    max_output_tokens=step.get("max_output_tokens", 0),
                    expected_output_tokens=step.get("expected_output_tokens"),
                )

            actual = outcome(acquire, "admitted")
            if "permit" in got and name is not None:
                self.permits[name] = got["permit"]
            return covers(expected, actual)
        if op == "settle":
            permit = self.named(step["permit"])
            return covers(
                expected,
                outcome(
                    lambda: permit.settle(
                        input_tokens=step.get("input_tokens", 0),
                        cached_input_tokens=step.get("cached_input_tokens", 0),
                        output_tokens=step.get("output_tokens", 0),
                    ),
                    "ok",
                ),
            )
        if op == "cancel":
            permit = self.named(step["permit"])
            return covers(expected, outcome(permit.cancel, "ok"))
        if op == "add_output":
            permit = self.named(step["permit"])
            return covers(expected, outcome(lambda: permit.add_output(step["tokens"]), "ok"))
        if op == "expect_limit":
            return covers(step, self.limit(step), skip=("op", "scope", "dimension", "limit"))
        if op == "expect_counters":
            return covers(step, self.gov.snapshot(), skip=("op",))
        raise Malformed(f"unknown op {op!r}")

    def limit(self, step: Dict[str, Any]) -> Dict[str, Any]:
        # Read from the snapshot: resolving the path would create a template scope.
        scopes = {s["path"]: s for s in self.gov.snapshot()["scopes"]}
        scope = scopes.get(step["scope"])
        if scope is None:
            raise Malformed(f"no scope {step['scope']!r} instantiated; known: {sorted(scopes)}")
        limits = scope["limits"]
        if "limit" in step:
            index = step["limit"]
            found = limits[index] if index < len(limits) and limits[index]["dimension"] == step["dimension"] else None
        else:
            found = next((lim for lim in limits if lim["dimension"] == step["dimension"]), None)
        if found is None:
            raise Malformed(f"scope {step['scope']!r} has no {step['dimension']} limit at {step.get('limit')}")
        return found


def test_enough_scenarios() -> None:
    assert len(FILES) >= MIN_SCENARIOS, f"only {len(FILES)} scenario files in {SCENARIOS}"


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_scenario(path: Path) -> None:
    scenario = json.loads(path.read_text())
    assert set(scenario) == {"name", "description", "config", "steps"}, f"{path.name}: bad top-level fields"
    assert scenario["name"] == path.stem and scenario["description"]
    run = Run(scenario["config"])
    for index, step in enumerate(scenario["steps"]):
        check_form(step)
        failure = run.step(step)
        assert failure is None, f"{path.name} steps[{index}] {json.dumps(step)}: {failure}"


def test_runner_catches_a_wrong_expectation() -> None:
    """The runner is not vacuous: a changed expected value fails."""
    path = SCENARIOS / "token_bucket_burst_and_refill.json"
    scenario = json.loads(path.read_text())
    run = Run(scenario["config"])
    failures = []
    for step in scenario["steps"]:
        if step["op"] == "expect_limit" and "available" in step:
            step = dict(step, available=step["available"] + 1)
        failure = run.step(step)
        if failure:
            failures.append(failure)
            break
    assert failures, "an off-by-one expectation passed"
