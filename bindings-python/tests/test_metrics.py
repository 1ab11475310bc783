"""Observability from Python, on the manual clock: `gov.metrics()` (one dict
drawn from the core's `Metrics`), the Prometheus text read back with
prometheus_client's own parser (every family the issue names, with the same
figures in `metrics()`), and `llmgov top` drawing `json.dumps(gov.metrics())`.
Mirrors core/tests/prometheus.rs and cli/tests/top.rs."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Mapping, Tuple

import pytest
from conftest import mock_server_binary, until
from prometheus_client.openmetrics.parser import text_string_to_metric_families

import llmgov


class Exposition:
    """A Prometheus text exposition as prometheus_client parses it. The core
    writes OpenMetrics text (counters' samples end in `_total`, the text in
    `# EOF`), so its OpenMetrics parser reads it: it is strict, and files
    each sample under its family (the classic text parser would file a
    counter's `_total` samples under a family of unknown type)."""

    def __init__(self, text: str) -> None:
        assert text.rstrip().endswith("# EOF"), text
        self.types: Dict[str, str] = {}
        self.samples: Dict[str, List[Any]] = {}
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            for sample in family.samples:
                self.samples.setdefault(sample.name, []).append(sample)

    def value(self, name: str, **labels: str) -> float:
        """The one sample of `name` whose labels include `labels`."""
        matching = [s.value for s in self.samples.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items())]
        assert len(matching) == 1, (name, labels, self.samples.get(name))
        return float(matching[0])


README = Path(__file__).resolve().parents[1] / "README.md"


def assert_listed_in_the_readme(exposed: Exposition) -> None:
    """Every family exposed is in the README's table, as its samples are named."""
    table = README.read_text().split("### Prometheus families", 1)[1].split("\n## ", 1)[0]
    for family, kind in exposed.types.items():
        name = f"{family}_total" if kind == "counter" else family
        assert f"`{name}`" in table, f"{name} ({kind}) is missing from the README's Prometheus families"


def limit_of(metrics: Mapping[str, Any], scope: str, dimension: str, window_ms: Any) -> Dict[str, Any]:
    """One limit of one scope in the snapshot of `metrics()`."""
    (found,) = [
        limit
        for s in metrics["snapshot"]["scopes"]
        if s["path"] == scope
        for limit in s["limits"]
        if limit["dimension"] == dimension and limit.get("window_ms") == window_ms
    ]
    return found


def refusals(metrics: Mapping[str, Any], dimension: str, decision: str) -> int:
    (count,) = [r["count"] for r in metrics["refusals"] if (r["dimension"], r["gateway_decision"]) == (dimension, decision)]
    return int(count)


ROUTE = ["tenants/acme", "openai/org"]
TOKENS_429 = b'{"error":{"type":"tokens","code":"rate_limit_exceeded"}}'


def limited_and_rejected() -> Tuple[llmgov.Governor, llmgov.Permit]:
    """A provider scope whose tokens AIMD took to 0.75 after a 429, a tenant
    refused at its concurrency, and one permit still held: the governor and
    that permit, 2 s after the 429."""
    # A decrease exact in binary keeps the effective burst a whole number.
    gov = llmgov.Governor.from_dict(
        {
            "adaptive": {"decrease": 0.75},
            "scopes": {
                "openai/org": {
                    "provider": True,
                    "limits": [
                        {"dimension": "requests", "amount": 500, "window": "1m"},
                        {"dimension": "tokens", "amount": 30000, "window": "1m"},
                        {"dimension": "tokens", "amount": 1000000, "window": "1d"},
                    ],
                },
                "tenants/*": {"limits": [{"dimension": "concurrency", "amount": 2}]},
            },
        },
        clock="manual",
    )
    permit = gov.try_acquire(ROUTE, 6000)
    held = gov.try_acquire(ROUTE, 100)
    with pytest.raises(llmgov.RateLimited):
        gov.try_acquire(ROUTE)  # two in flight at most
    assert permit.report(429, {"retry-after": "2"}, TOKENS_429)["dimension"] == "tokens"
    permit.settle(6000, 0)
    gov.advance(2000)
    return gov, held


MINUTE = {"scope": "openai/org", "dimension": "tokens", "window_ms": "60000"}
DAILY = {"scope": "openai/org", "dimension": "tokens", "window_ms": "86400000"}
SLOTS = {"scope": "tenants/acme", "dimension": "concurrency", "window_ms": "none"}


def test_limits_after_aimd_reserved_and_used_parse_with_the_real_parser() -> None:
    gov, held = limited_and_rejected()
    exposed = Exposition(gov.prometheus())
    for family in ("llmgov_limit", "llmgov_limit_effective", "llmgov_in_use", "llmgov_reserved", "llmgov_used"):
        assert exposed.types[family] == "gauge", family
    assert exposed.value("llmgov_limit", **MINUTE) == 30000
    assert exposed.value("llmgov_limit_effective", **MINUTE) == 22500, "AIMD took it to 0.75"
    assert exposed.value("llmgov_in_use", **MINUTE) == 22500, "empty as the 429's cooldown ends"
    assert exposed.value("llmgov_limit_effective", **DAILY) == 1000000, "only the limit the 429 named"
    assert exposed.value("llmgov_in_use", **DAILY) == 6077, "6100 less 2 s of 1M a day"
    assert exposed.value("llmgov_reserved", **DAILY) == 100, "the permit still held"
    assert exposed.value("llmgov_used", **DAILY) == 5977
    assert exposed.value("llmgov_utilisation", **SLOTS) == 0.5
    assert exposed.value("llmgov_reserved", **SLOTS) == 1
    assert exposed.value("llmgov_admitted_total") == 2
    assert exposed.value("llmgov_rate_limited_total") == 1
    assert exposed.value("llmgov_provider_rejected_total") == 1
    assert exposed.value("llmgov_breaker", scope="openai/org", state="closed") == 1
    assert_listed_in_the_readme(exposed)

    # The same figures in metrics(), whose snapshot is snapshot()'s.
    metrics = gov.metrics()
    assert metrics["snapshot"] == gov.snapshot() and metrics["queues"] == gov.queue_metrics()
    minute = limit_of(metrics, "openai/org", "tokens", 60000)
    assert (minute["amount"], minute["effective_amount"], minute["in_use"]) == (30000, 22500, 22500)
    daily = limit_of(metrics, "openai/org", "tokens", 86400000)
    assert (daily["in_use"], daily["reserved"], daily["used"]) == (6077, 100, 5977)
    assert limit_of(metrics, "tenants/acme", "concurrency", None)["reserved"] == 1
    assert metrics["snapshot"]["admitted_then_provider_rejected"] == 1

    held.cancel()
    after = Exposition(gov.prometheus())
    assert after.value("llmgov_reserved", **DAILY) == 0 and after.value("llmgov_used", **DAILY) == 5977
    assert after.value("llmgov_in_use", **DAILY) == 5977, "the cancelled 100 came back"
    assert after.value("llmgov_reserved", **SLOTS) == 0


def test_refusals_by_both_parties_estimate_error_and_amplification_parse() -> None:
    gov, _held = limited_and_rejected()
    exposed = Exposition(gov.prometheus())
    assert exposed.types["llmgov_refusals"] == "counter"
    local = {"gateway_decision": "rejected_locally"}
    provider = {"gateway_decision": "admitted_then_provider_rejected"}
    assert exposed.value("llmgov_refusals_total", dimension="concurrency", **local) == 1
    assert exposed.value("llmgov_refusals_total", dimension="tokens", **provider) == 1
    assert exposed.value("llmgov_refusals_total", dimension="requests", **local) == 0, "zeros are exposed too"
    assert exposed.value("llmgov_refusals_total", dimension="tokens", **local) == 0
    # One of two admitted was refused by the provider: two sent per success.
    assert exposed.types["llmgov_retry_amplification"] == "gauge"
    assert exposed.value("llmgov_retry_amplification") == 2.0
    # The estimate was exact: no error on input, from one settled request.
    input_side = {"route": "openai/org", "side": "input"}
    for quantile in ("0.05", "0.5", "0.95"):
        assert exposed.value("llmgov_estimate_error", quantile=quantile, **input_side) == 0.0
    assert exposed.value("llmgov_estimate_samples_total", **input_side) == 1

    metrics = gov.metrics()
    assert refusals(metrics, "concurrency", "rejected_locally") == 1
    assert refusals(metrics, "tokens", "admitted_then_provider_rejected") == 1
    assert refusals(metrics, "requests", "rejected_locally") == 0
    assert metrics["retry_amplification"] == 2.0
    (estimate,) = [e for e in metrics["estimate_errors"] if e["side"] == "input"]
    assert estimate == {"scopes": ["openai/org"], "side": "input", "samples": 1, "p05": 0.0, "p50": 0.0, "p95": 0.0}


def test_an_estimate_off_by_a_quarter_is_its_error() -> None:
    gov = llmgov.Governor.from_dict(
        {"scopes": {"openai/org": {"provider": True, "limits": [{"dimension": "tokens", "amount": 100000, "window": "1m"}]}}},
        clock="manual",
    )
    for _ in range(10):
        gov.try_acquire("openai/org", 1000, 400, expected_output_tokens=400).settle(1250, 300)
    (inputs,) = [e for e in gov.metrics()["estimate_errors"] if e["side"] == "input"]
    (outputs,) = [e for e in gov.metrics()["estimate_errors"] if e["side"] == "output"]
    # Quantiles are exact to about 1.6% of the ratio.
    assert inputs["samples"] == 10 and inputs["p50"] == pytest.approx(0.25, abs=0.02)
    assert outputs["samples"] == 10 and outputs["p50"] == pytest.approx(-0.25, abs=0.02)
    exposed = Exposition(gov.prometheus())
    assert exposed.value("llmgov_estimate_error", route="openai/org", side="input", quantile="0.5") == inputs["p50"]
    assert exposed.value("llmgov_estimate_error", route="openai/org", side="output", quantile="0.5") == outputs["p50"]


async def test_queue_depth_and_oldest_waiter_while_pending_then_expiries() -> None:
    gov = llmgov.Governor.from_dict(
        {"permit_ttl": "1m", "scopes": {"p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1m"}]}}},
        clock="manual",
    )
    forgotten = gov.try_acquire("p")  # held past its TTL: it expires unsettled
    waiter = asyncio.ensure_future(gov.acquire("p"))
    await until(lambda: gov.queue_metrics()["depth"] == 1)
    gov.advance(1500)

    exposed = Exposition(gov.prometheus())
    assert exposed.types["llmgov_queue_depth"] == "gauge"
    assert exposed.value("llmgov_queue_depth", **{"class": ""}) == 1
    assert exposed.value("llmgov_queue_oldest_wait_seconds", **{"class": ""}) == 1.5
    assert exposed.value("llmgov_expired_permits_total") == 0, "not yet"
    (default,) = gov.metrics()["queues"]["classes"]
    assert (default["class"], default["depth"], default["oldest_wait_ms"]) == ("", 1, 1500)
    assert not waiter.done()

    # Past the window the waiter passes; past the TTL the first expires.
    gov.advance(120_000)
    permit = await asyncio.wait_for(waiter, 5)
    exposed = Exposition(gov.prometheus())
    assert exposed.value("llmgov_queue_depth", **{"class": ""}) == 0
    assert exposed.value("llmgov_queue_oldest_wait_seconds", **{"class": ""}) == 0
    assert exposed.value("llmgov_expired_permits_total") == 1
    assert exposed.value("llmgov_queue_admitted_total", **{"class": ""}) == 1
    assert gov.metrics()["snapshot"]["expired_permits"] == 1
    with pytest.raises(llmgov.PermitExpired):  # its handle learns it when it settles
        forgotten.settle()
    assert forgotten.state == "expired"
    permit.settle()


async def test_the_wait_histogram_and_borrowed_capacity_per_class() -> None:
    # A tenant guaranteed 100 tokens a minute: its first 100 are its own,
    # what it gets past them is borrowed.
    gov = llmgov.Governor.from_dict(
        {
            "scopes": {
                "p": {"limits": [{"dimension": "requests", "amount": 1, "window": "1s"}]},
                "tenants/*": {"limits": [{"dimension": "concurrency", "amount": 10}]},
            },
            "shares": {"tenants/*": {"guarantee": 100, "window": "1m"}},
        },
        clock="manual",
    )
    route = ["tenants/acme", "p"]
    gov.try_acquire(route, 100)
    # Two waiters: admitted after 1 s and 2 s.
    waiting = [asyncio.ensure_future(gov.acquire(route, 100)) for _ in range(2)]
    await until(lambda: gov.queue_metrics()["depth"] == 2)
    gov.advance(1000)
    first = await asyncio.wait_for(waiting[0], 5)
    assert not waiting[1].done()
    gov.advance(1000)
    second = await asyncio.wait_for(waiting[1], 5)

    exposed = Exposition(gov.prometheus())
    assert exposed.types["llmgov_queue_wait_seconds"] == "histogram"
    bucket = "llmgov_queue_wait_seconds_bucket"
    assert exposed.value(bucket, le="0.5", **{"class": ""}) == 0
    assert exposed.value(bucket, le="1.0", **{"class": ""}) == 1
    assert exposed.value(bucket, le="2.5", **{"class": ""}) == 2
    assert exposed.value(bucket, le="+Inf", **{"class": ""}) == 2
    assert exposed.value("llmgov_queue_wait_seconds_count", **{"class": ""}) == 2
    assert exposed.value("llmgov_queue_wait_seconds_sum", **{"class": ""}) == 3.0
    assert exposed.value("llmgov_queue_borrowed_tokens_total", **{"class": ""}) == 100, "the second one's"
    assert exposed.value("llmgov_queue_refused_total", reason="queue_full", **{"class": ""}) == 0
    assert_listed_in_the_readme(exposed)

    (default,) = gov.metrics()["queues"]["classes"]
    assert (default["admitted"], default["borrowed_tokens"], default["longest_admitted_wait_ms"]) == (2, 100, 2000)
    assert default["wait"]["sum_ns"] == 3_000_000_000 and sum(default["wait"]["counts"]) == 2
    first.settle()
    second.settle()


# --- llmgov top -------------------------------------------------------------------


def top(source: Path) -> str:
    drawn = subprocess.run(
        [str(mock_server_binary()), "top", str(source), "--once"], capture_output=True, text=True, timeout=60
    )
    assert drawn.returncode == 0, drawn.stderr
    return drawn.stdout


def test_llmgov_top_draws_the_json_of_metrics(tmp_path: Path) -> None:
    gov, _held = limited_and_rejected()
    exposed = tmp_path / "metrics.json"
    exposed.write_text(json.dumps(gov.metrics()))
    text = top(exposed)
    assert "llmgov top  t=2.0s  admitted 2  rate limited 1" in text and "provider 429s 1" in text, text
    refused = "refused here: concurrency 1  by the provider: tokens 1  retry amplification 2.00"
    assert refused in text, text
    lines = text.splitlines()
    (minute,) = [line for line in lines if line.startswith("openai/org") and " tokens " in line and " 1m " in line]
    assert "22500 / 22500" in minute and "100%" in minute and "(configured 30000)" in minute, minute
    (daily,) = [line for line in lines if line.startswith("openai/org") and " 1d " in line]
    assert "6077 / 1000000" in daily and "(configured" not in daily, daily
    (slots,) = [line for line in lines if line.startswith("tenants/acme")]
    assert "1 / 2" in slots and " 50%" in slots, slots
    assert "queues: none" in text, text

    # A bare snapshot is drawn too, without the metrics' extra lines.
    exposed.write_text(json.dumps(gov.snapshot()))
    bare = top(exposed)
    assert "22500 / 22500" in bare and "retry amplification" not in bare and "queues:" not in bare, bare


def test_the_cost_and_metrics_example_runs_top_draws_it_and_it_is_in_the_readme(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import runpy
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the example writes its JSON
    root = Path(__file__).resolve().parents[1]
    runpy.run_path(str(root / "examples" / "cost_and_metrics.py"), run_name="__main__")
    printed = capsys.readouterr().out
    assert "refused on tenants/acme cost" in printed and "spent 0.047 of 0.05" in printed, printed
    assert "refused [('cost', 'rejected_locally', 1)]" in printed and "retry amplification 1.0" in printed, printed
    assert 'llmgov_in_use{scope="tenants/acme",dimension="cost",window_ms="86400000"} 47000' in printed, printed
    drawn = top(tmp_path / "llmgov-metrics.json")
    (tenant,) = [line for line in drawn.splitlines() if line.startswith("tenants/acme")]
    assert "47000 / 50000" in tenant and " 94%" in tenant, tenant
    assert "refused here: cost 1  by the provider: none" in drawn, drawn
    example = (root / "examples" / "cost_and_metrics.py").read_text().split('"""', 2)[2].lstrip("\n")
    assert example in (root / "README.md").read_text()
