"""`llmgov.plan_capacity`: the core's planner (the one `llmgov plan` prints)
with the command's inputs as keyword arguments, returning a dict."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import mock_server_binary

import llmgov


def test_the_seed_batch_case_is_token_bound() -> None:
    plan = llmgov.plan_capacity(rpm=60, tpm=100_000, avg_input=1500, avg_output=500, utilisation=1.0)
    assert plan["binding"] == "tpm"
    assert plan["sustainable_rpm"] == pytest.approx(50.0)
    assert plan["ceilings"] == [{"limit": "rpm", "rpm": 60.0}, {"limit": "tpm", "rpm": 50.0}]
    assert plan["sustainable_rpm_reserving_p95"] is None


def test_concurrency_and_p95_reservations() -> None:
    plan = llmgov.plan_capacity(rpm=60, tpm=100_000, concurrency=10, latency=30, avg_input=1500, avg_output=500)
    assert (plan["binding"], plan["sustainable_rpm"]) == ("concurrency", pytest.approx(18.0)), "20 a minute at 90%"
    held = llmgov.plan_capacity(rpm=60, tpm=100_000, avg_input=1500, avg_output=500, p95_output=1500)
    assert held["sustainable_rpm"] == pytest.approx(45.0)
    assert held["sustainable_rpm_reserving_p95"] == pytest.approx(30.0)


def test_a_limit_on_tokens_requests_do_not_use_allows_any_rate() -> None:
    plan = llmgov.plan_capacity(rpm=60, output_tpm=1000, avg_input=100, avg_output=0)
    assert {"limit": "output_tpm", "rpm": float("inf")} in plan["ceilings"]
    assert plan["binding"] == "rpm"


def test_it_agrees_with_llmgov_plan() -> None:
    flags = ["--rpm", "500", "--tpm", "30000", "--avg-input", "1200", "--avg-output", "300", "--p95-output", "900"]
    printed = subprocess.run([str(mock_server_binary()), "plan", "--json", *flags], capture_output=True, check=True)
    plan = llmgov.plan_capacity(rpm=500, tpm=30000, avg_input=1200, avg_output=300, p95_output=900)
    assert plan == json.loads(printed.stdout)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"rpm": -1}, "rpm"),
        ({"tpm": 0}, "tpm"),
        ({"rpm": "60"}, "rpm"),
        ({"rpm": True}, "rpm"),
        ({"rpm": 60, "utilisation": 1.5}, "utilisation"),
        ({"rpm": 60, "latency": float("nan")}, "latency"),
        ({"rpm": 60, "avg_input": -5}, "avg_input"),
        ({}, "rpm/tpm/input_tpm/output_tpm/concurrency"),
    ],
)
def test_bad_input_names_the_argument(kwargs: dict, field: str) -> None:
    args = {"avg_input": 100, "avg_output": 100, **kwargs}
    with pytest.raises(llmgov.InvalidRequest) as bad:
        llmgov.plan_capacity(**args)
    assert bad.value.field == field
    assert bad.value.code == "invalid_request"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"rpm": 60, "avg_output": 100}, "avg_input"),
        ({"rpm": 60, "avg_input": 100}, "avg_output"),
        ({"rpm": 60, "avg_input": 100, "avg_output": 100, "rps": 3}, "rps"),
    ],
)
def test_a_missing_or_unknown_keyword_names_it(kwargs: dict, field: str) -> None:
    """Not a bare TypeError: an InvalidRequest naming the argument."""
    with pytest.raises(llmgov.InvalidRequest) as bad:
        llmgov.plan_capacity(**kwargs)
    assert bad.value.field == field
