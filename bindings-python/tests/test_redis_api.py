"""llmgov.redis.RedisGovernor as a user calls it: construction from TOML or
a dict, admission and reconciliation in Redis, errors mapped to the
package's exception tree, and the safe local share while Redis is away.

The tests marked ``needs_redis`` run against the server named by
``LLMGOV_REDIS_URL`` (``make test-redis-python`` starts one) and are skipped
without it; the rest need no server."""

from __future__ import annotations

import os
import queue
import shutil
import socket
import subprocess
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

import llmgov
from llmgov.redis import AlreadyReconciled, RedisGovernor, RedisPermit


# The Redis I/O timeout of every config here: far above the 250 ms default,
# so a call slowed by a loaded machine is not taken for an outage (which would
# send the governor to its safe share). Refused connections still fail at once.
TIMEOUT = "2s"


def redis_url() -> str:
    url = os.environ.get("LLMGOV_REDIS_URL", "")
    if not url:
        pytest.skip("LLMGOV_REDIS_URL is not set (run `make test-redis-python`, which starts a redis-server)")
    return url


def fresh_prefix(test: str) -> str:
    return f"py-{test}-{os.getpid()}-{time.time_ns()}"


def closed_port_url() -> str:
    """A loopback URL nobody listens on: every Redis call fails at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://127.0.0.1:{port}"


def config(url: str, prefix: str, *, mode: str = "exact", tokens: int = 1000, processes: int = 2) -> str:
    return f"""
[scopes."p/shared"]
limits = [{{ dimension = "tokens", amount = {tokens}, window = "1d" }}]
[scopes."tenants/*"]
limits = [{{ dimension = "requests", amount = 1000, window = "1m" }}]
[redis]
url = "{url}"
prefix = "{prefix}"
expected_processes = {processes}
timeout = "{TIMEOUT}"
[redis.scopes."p/shared"]
mode = "{mode}"
"""


def as_dict(url: str, prefix: str) -> Dict[str, Any]:
    return {
        "scopes": {"p/shared": {"limits": [{"dimension": "tokens", "amount": 1000, "window": "1d"}]}},
        "redis": {
            "url": url,
            "prefix": prefix,
            "expected_processes": 2,
            "timeout": TIMEOUT,
            "scopes": {"p/shared": {"mode": "exact"}},
        },
    }


# --- no server needed ---------------------------------------------------------


def test_config_errors_name_the_field_and_value() -> None:
    with pytest.raises(llmgov.ConfigError) as missing:
        RedisGovernor.from_toml('[scopes."p/shared"]\nlimits = []\n')
    assert (missing.value.field, missing.value.code) == ("redis", "invalid_config")

    with pytest.raises(llmgov.ConfigError) as prefix:
        RedisGovernor.from_toml(config(closed_port_url(), "bad prefix!"))
    assert (prefix.value.field, prefix.value.value) == ("redis.prefix", "bad prefix!")

    with pytest.raises(llmgov.ConfigError) as ttl:
        RedisGovernor.from_toml(config(closed_port_url(), "p").replace("expected_processes", 'slot_ttl = "soon"\nexpected_processes'))
    assert (ttl.value.field, ttl.value.value) == ("redis.slot_ttl", "soon")

    secret = config("redis://:hunter2@127.0.0.1:1", "p").replace("expected_processes = 2", "expected_processes = 0")
    with pytest.raises(llmgov.ConfigError) as zero:
        RedisGovernor.from_toml(secret)
    assert zero.value.field == "redis.expected_processes"
    assert "hunter2" not in str(zero.value)

    with pytest.raises(llmgov.ConfigError) as clock:
        RedisGovernor.from_toml(config(closed_port_url(), "p"), clock="sundial")  # type: ignore[arg-type]
    assert (clock.value.field, clock.value.value) == ("clock", "sundial")

    with pytest.raises(llmgov.ConfigError) as not_a_dict:
        RedisGovernor.from_dict(["not", "a", "dict"])  # type: ignore[arg-type]
    assert not_a_dict.value.field == "config"


def test_bad_redis_values_name_the_field_and_the_value(tmp_path: Path) -> None:
    """A value of the wrong type named no value; a year-long TTL was taken
    (and overflowed); a CA file with no certificate was taken, and every
    connection then failed: the process ran on its safe share for good."""
    wrong_type = as_dict(closed_port_url(), "p")
    wrong_type["redis"]["url"] = 5
    with pytest.raises(llmgov.ConfigError) as url:
        RedisGovernor.from_dict(wrong_type)
    assert (url.value.field, url.value.value) == ("redis.url", "5")

    for field, text in [("lease_ttl", "1000years"), ("slot_ttl", "1ms"), ("retry_interval", "2days")]:
        too_far = as_dict(closed_port_url(), "p")
        too_far["redis"][field] = text
        with pytest.raises(llmgov.ConfigError) as ttl:
            RedisGovernor.from_dict(too_far)
        assert (ttl.value.field, ttl.value.value) == (f"redis.{field}", text)

    not_pem = tmp_path / "ca.der"
    not_pem.write_bytes(bytes([0x30, 0x82, 0x01, 0x0A]))
    for url_text in ["rediss://127.0.0.1:6379", "redis://127.0.0.1:6379"]:
        bad_ca = as_dict(url_text, "p")
        bad_ca["redis"]["tls_ca_file"] = str(not_pem)
        with pytest.raises(llmgov.ConfigError) as ca:
            RedisGovernor.from_dict(bad_ca)
        assert (ca.value.field, ca.value.value) == ("redis.tls_ca_file", str(not_pem))


def test_a_route_of_another_governor_is_invalid_request() -> None:
    """Its shared scopes went by index into the other governor's: a
    PanicException past the end of them, or another scope's bucket."""
    two = config(closed_port_url(), "p").replace(
        '[redis.scopes."p/shared"]', '[scopes."p/other"]\nlimits = [{ dimension = "requests", amount = 5, window = "1m" }]\n'
        '[redis.scopes."p/other"]\nmode = "exact"\n[redis.scopes."p/shared"]'
    )
    owner = RedisGovernor.from_toml(two, clock="manual")
    other = RedisGovernor.from_toml(config(closed_port_url(), "p"), clock="manual")
    with pytest.raises(llmgov.InvalidRequest) as foreign:
        other.try_acquire(owner.route("p/shared"), input_tokens=1)
    assert foreign.value.field == "route"


def test_leased_scopes_refuse_concurrency_limits_with_the_field() -> None:
    text = config(closed_port_url(), "p", mode="leased").replace(
        'window = "1d" }]', 'window = "1d" }, { dimension = "concurrency", amount = 4 }]', 1
    )
    with pytest.raises(llmgov.ConfigError) as err:
        RedisGovernor.from_toml(text)
    assert "p/shared" in err.value.field or "p/shared" in str(err.value)


def test_bad_request_arguments_are_invalid_request() -> None:
    gov = RedisGovernor.from_toml(config(closed_port_url(), "p"), clock="manual")
    with pytest.raises(llmgov.InvalidRequest) as unknown:
        gov.try_acquire("p/shared", input_tokens=1, klass="batch")
    assert unknown.value.field == "klass"
    with pytest.raises(llmgov.InvalidRequest) as negative:
        gov.try_acquire("p/shared", input_tokens=-1)
    assert negative.value.field == "input_tokens"
    with pytest.raises(llmgov.InvalidRequest) as both:
        gov.try_acquire("p/shared", input_tokens=1, text="hello")
    assert both.value.field == "input_tokens"
    with pytest.raises(llmgov.UnknownScope):
        gov.try_acquire("nowhere/x", input_tokens=1)
    with pytest.raises(llmgov.InvalidRequest) as surrogate:
        gov.try_acquire(["tenants/\udcff", "p/shared"], input_tokens=1)
    assert surrogate.value.field == "paths"
    with pytest.raises(llmgov.InvalidRequest) as route:
        gov.route("p/\udcff")
    assert route.value.field == "paths"


def test_a_clock_that_is_not_a_name_is_a_config_error() -> None:
    text = config(closed_port_url(), "p")
    for build in (lambda clock: RedisGovernor.from_toml(text, clock=clock),
                  lambda clock: RedisGovernor.from_dict(as_dict(closed_port_url(), "p"), clock=clock)):
        with pytest.raises(llmgov.ConfigError) as bad:
            build(5)
        assert (bad.value.field, bad.value.value) == ("clock", "5")
    with pytest.raises(llmgov.InvalidRequest) as far:
        RedisGovernor.from_toml(text, clock="manual").advance(2**70)
    assert far.value.field == "ms"


def test_redis_unreachable_admits_the_safe_share_then_probes_on_the_manual_clock(tmp_path: Path) -> None:
    source = tmp_path / "gov.toml"
    source.write_text(config(closed_port_url(), "p", tokens=4000, processes=4))  # safe share: 1000
    gov = RedisGovernor.from_toml(source, clock="manual")

    permits = [gov.try_acquire("p/shared", input_tokens=60, max_output_tokens=40) for _ in range(10)]
    assert all(p.from_fallback for p in permits)
    with pytest.raises(llmgov.RateLimited) as refused:
        gov.try_acquire("p/shared", input_tokens=60, max_output_tokens=40)
    assert (refused.value.scope, refused.value.dimension) == ("p/shared", "tokens")

    health = gov.health()
    assert health["degraded"] is True
    assert health["fallback_admissions"] == 10
    assert health["redis_errors"] == 1, "one failed call, then no probe before retry_interval"
    assert health["last_error"]

    # Settling 50 of each 100 gives 500 back to the safe share: 5 more fit, not 6.
    for p in permits:
        p.settle(input_tokens=30, output_tokens=20)
    extra = [gov.try_acquire("p/shared", input_tokens=60, max_output_tokens=40) for _ in range(4)]
    assert gov.health()["redis_errors"] == 1
    # Past retry_interval (1s) one call probes Redis again, fails, and falls back.
    gov.advance(1000)
    extra.append(gov.try_acquire("p/shared", input_tokens=60, max_output_tokens=40))
    assert gov.health()["redis_errors"] == 2
    assert gov.health()["fallback_admissions"] == 15
    with pytest.raises(llmgov.RateLimited):
        gov.try_acquire("p/shared", input_tokens=60, max_output_tokens=40)
    for p in extra:
        p.cancel()


def test_permit_lifecycle_without_redis_state_charged_and_context_manager() -> None:
    gov = RedisGovernor.from_toml(config(closed_port_url(), "p"), clock="manual")
    permit = gov.try_acquire(["tenants/acme", "p/shared"], input_tokens=100, max_output_tokens=50)
    assert isinstance(permit, RedisPermit)
    assert permit.state == "pending"
    assert permit.charged == {"input_tokens": 100, "cached_input_tokens": 0, "output_tokens": 50}
    permit.settle({"prompt_tokens": 90, "completion_tokens": 12})
    assert permit.state == "settled"
    assert permit.charged["output_tokens"] == 12
    with pytest.raises(AlreadyReconciled) as twice:
        permit.cancel()
    assert twice.value.code == "already_reconciled"
    assert isinstance(twice.value, llmgov.Error)

    # Positional counts, as the local Permit takes them.
    positional = gov.try_acquire("p/shared", 100, 50)
    assert positional.charged["output_tokens"] == 50
    positional.settle(90, 12)
    assert (positional.charged["input_tokens"], positional.charged["output_tokens"]) == (90, 12)
    by_keyword = gov.try_acquire("p/shared", input_tokens=100, max_output_tokens=50)
    by_keyword.settle(usage={"input_tokens": 80, "output_tokens": 5})
    assert by_keyword.charged["input_tokens"] == 80
    with pytest.raises(llmgov.InvalidRequest) as both:
        gov.try_acquire("p/shared", 10).settle({"input_tokens": 1}, output_tokens=2)
    assert both.value.field == "usage"

    with gov.try_acquire("p/shared", input_tokens=10) as held:
        pass
    assert held.state == "settled"
    with pytest.raises(ZeroDivisionError):
        with gov.try_acquire("p/shared", input_tokens=10) as failed:
            1 / 0
    assert failed.state == "cancelled"
    with pytest.raises(llmgov.InvalidRequest):
        gov.advance(-1)


# --- against a real Redis -------------------------------------------------------


def test_settle_refunds_and_charges_the_difference_in_redis() -> None:
    url, prefix = redis_url(), fresh_prefix("settle")
    a = RedisGovernor.from_toml(config(url, prefix))
    b = RedisGovernor.from_dict(as_dict(url, prefix))
    big = a.try_acquire("p/shared", input_tokens=400, max_output_tokens=500)  # 900 of 1000
    with pytest.raises(llmgov.RateLimited) as refused:
        b.try_acquire("p/shared", input_tokens=100, max_output_tokens=100)
    assert refused.value.scope == "p/shared"
    assert refused.value.dimension == "tokens"
    assert refused.value.gateway_decision == "rejected_locally"
    assert refused.value.retry_after is not None and refused.value.retry_after > 0
    assert not big.from_fallback

    big.settle(output_tokens=100)  # used 500 of 900: 400 back
    small = b.try_acquire("p/shared", input_tokens=300, max_output_tokens=100)
    small.settle(input_tokens=300, output_tokens=300)  # ran long: 200 more; 1000 - 500 - 600 < 0
    with pytest.raises(llmgov.RateLimited):
        a.try_acquire("p/shared", input_tokens=1)
    with pytest.raises(AlreadyReconciled):
        big.settle()
    for gov in (a, b):
        health = gov.health()
        assert not health["degraded"] and health["fallback_admissions"] == 0
        assert health["redis_calls"] >= 2


def test_a_cost_budget_on_a_shared_scope_is_spent_by_both_governors() -> None:
    url, prefix = redis_url(), fresh_prefix("budget")
    text = f"""
[pricing.gpt-4o]
input = 2.5
output = 10.0
[scopes."openai/gpt-4o"]
pricing = "gpt-4o"
limits = [{{ dimension = "requests", amount = 1000, window = "1m" }}]
[scopes."teams/ml"]
limits = [{{ dimension = "cost", budget = 0.1, window = "1d", algorithm = "token_bucket" }}]
[redis]
url = "{url}"
prefix = "{prefix}"
expected_processes = 2
timeout = "{TIMEOUT}"
[redis.scopes."teams/ml"]
mode = "exact"
"""
    a, b = RedisGovernor.from_toml(text), RedisGovernor.from_toml(text)
    paths = ["teams/ml", "openai/gpt-4o"]
    admitted, refusals = [], []
    for i in range(20):
        try:
            admitted.append((a if i % 2 else b).try_acquire(paths, 1000, 1000))
        except llmgov.RateLimited as refused:
            refusals.append((refused.scope, refused.dimension))
    # 0.1 at 0.0125 a request (1000 in at 2.5, 1000 out at 10 per million): 8 between them.
    assert len(admitted) == 8 and set(refusals) == {("teams/ml", "cost")}
    for permit in admitted:
        permit.settle(1000, 500)  # 0.0075 each: 0.005 back
    assert sum(admits(a, paths) for _ in range(10)) == 3


def admits(gov: RedisGovernor, paths: List[str]) -> bool:
    """Whether `gov` admits a request of 1000 in, 1000 out on `paths` now (left pending)."""
    try:
        gov.try_acquire(paths, 1000, 1000)
        return True
    except llmgov.RateLimited:
        return False


@pytest.mark.parametrize("paths", [["tenants/acme", "p/shared"], "p/shared"])
def test_a_refused_settle_leaves_the_permit_pending_and_charges_nothing(paths: Any) -> None:
    url, prefix = redis_url(), fresh_prefix("bad-settle")
    gov = RedisGovernor.from_toml(config(url, prefix), clock="manual")
    other = RedisGovernor.from_toml(config(url, prefix), clock="manual")
    bad = [
        (lambda p: p.settle(2**41, 0), "input_tokens"),
        (lambda p: p.settle(1, 0, cached_input_tokens=9), "cached_input_tokens"),
        (lambda p: p.settle({"input_tokens": 1, "cached_input_tokens": 9}), "cached_input_tokens"),
        (lambda p: p.settle(1, 2**41), "output_tokens"),
    ]
    for settle, field in bad:
        permit = gov.try_acquire(paths, 100, 100)
        with pytest.raises(llmgov.InvalidRequest) as refused:
            settle(permit)
        assert refused.value.field == field
        assert permit.state == "pending"
        permit.settle(100, 0)
        assert permit.state == "settled"
    # Nothing absurd was charged in Redis: another process has the rest (1000 - 400).
    other.try_acquire("p/shared", 500, 100).settle()
    with pytest.raises(llmgov.InvalidRequest) as estimate:
        gov.try_acquire("p/shared", 2**64 - 1, 1)
    assert estimate.value.field == "input_tokens"


def test_add_output_charges_streamed_output_on_the_local_scopes_and_settles_it() -> None:
    url = redis_url()
    gov = RedisGovernor.from_toml(
        f"""
[scopes."team"]
limits = [{{ dimension = "tokens", amount = 100000, window = "1m" }}]
[scopes."openai/key"]
limits = [{{ dimension = "output_tokens", amount = 100, window = "1m" }}]
[redis]
url = "{url}"
prefix = "{fresh_prefix('add-output')}"
expected_processes = 2
timeout = "{TIMEOUT}"
[redis.scopes."team"]
mode = "exact"
""",
        clock="manual",
    )
    paths = ["team", "openai/key"]
    streaming = gov.try_acquire(paths, input_tokens=10, max_output_tokens=40)
    calls = gov.health()["redis_calls"]
    streaming.add_output(30)
    streaming.add_output(40)  # 70 streamed: 30 past the reservation, charged at once
    assert gov.health()["redis_calls"] == calls, "no Redis call"
    assert streaming.charged["output_tokens"] == 70
    with pytest.raises(llmgov.RateLimited) as refused:
        gov.try_acquire(paths, input_tokens=10, max_output_tokens=40)
    assert refused.value.scope == "openai/key"
    with pytest.raises(llmgov.InvalidRequest) as bad:
        streaming.add_output(-1)
    assert (bad.value.field, bad.value.value) == ("tokens", "-1")
    streaming.settle()  # as estimated: the 70 streamed
    assert streaming.charged["output_tokens"] == 70
    with pytest.raises(AlreadyReconciled):
        streaming.add_output(1)


def test_cancel_gives_everything_back_and_never_fits_is_said_at_once() -> None:
    gov = RedisGovernor.from_toml(config(redis_url(), fresh_prefix("cancel")))
    route = gov.route(["tenants/acme", "p/shared"])
    assert gov.route(("tenants/acme", "p/shared")).paths == route.paths
    permit = gov.try_acquire(route, input_tokens=500, max_output_tokens=500)
    permit.cancel()
    assert permit.state == "cancelled"
    gov.try_acquire(route, text="hello " * 100, max_output_tokens=800).settle()
    with pytest.raises(llmgov.NeverFits) as never:
        gov.try_acquire(route, input_tokens=900, max_output_tokens=200)
    assert (never.value.cost, never.value.burst, never.value.dimension) == (1100, 1000, "tokens")
    tenants = [s for s in gov.snapshot()["scopes"] if s["path"] == "tenants/acme"]
    assert tenants, "the local scopes stay in the process's snapshot"


def test_metrics_are_the_local_engines() -> None:
    # No Redis needed: the route is local only, so Redis is never asked.
    text = config(closed_port_url(), fresh_prefix("metrics")).replace('amount = 1000, window = "1m"', 'amount = 1, window = "1m"')
    gov = RedisGovernor.from_toml(text, clock="manual")
    gov.try_acquire("tenants/acme", input_tokens=10).settle()
    with pytest.raises(llmgov.RateLimited) as refused:
        gov.try_acquire("tenants/acme", input_tokens=10)
    assert (refused.value.scope, refused.value.dimension) == ("tenants/acme", "requests")
    metrics = gov.metrics()
    assert metrics["snapshot"] == gov.snapshot()
    assert [s["path"] for s in metrics["snapshot"]["scopes"]] == ["tenants/acme"], "the shared scope is Redis's"
    assert (metrics["snapshot"]["admitted"], metrics["snapshot"]["rate_limited"]) == (1, 1)
    (local,) = [r for r in metrics["refusals"] if (r["dimension"], r["gateway_decision"]) == ("requests", "rejected_locally")]
    assert local["count"] == 1
    assert metrics["retry_amplification"] == 1.0 and metrics["queues"]["depth"] == 0


def test_the_module_quick_start_runs() -> None:
    redis_url()
    import llmgov.redis

    doc = llmgov.redis.__doc__ or ""
    example = textwrap.dedent(doc.split("::\n", 1)[1].split("\n\nThe engine", 1)[0])
    assert "RedisGovernor.from_toml" in example and "expected_processes = 8\n" in example
    example = example.replace("prod-eu", fresh_prefix("quick-start"))
    # The example asserts Redis answered: allow it the tests' timeout.
    example = example.replace("expected_processes = 8\n", f'expected_processes = 8\ntimeout = "{TIMEOUT}"\n')
    exec(compile(example, "llmgov.redis docstring", "exec"), {})


READY = "Ready to accept connections"  # what redis-server and valkey-server log once they listen


class PrivateServer:
    """A redis-server (or the `LLMGOV_REDIS_SERVER` binary, e.g. valkey-server)
    of the test's own on a free loopback port, without persistence. Ready
    when its own log says it listens, so a process that took the port first
    is never mistaken for it; a port taken that way is retried on another."""

    def __init__(self, *extra: str) -> None:
        binary = shutil.which(os.environ.get("LLMGOV_REDIS_SERVER", "redis-server"))
        if binary is None:
            pytest.skip("no redis-server binary (make test-redis-python installs one)")
        self.binary, self.extra = binary, extra
        for _ in range(3):
            self.port = int(closed_port_url().rsplit(":", 1)[1])
            if self._spawn():
                return
        pytest.fail(f"{binary}: no free port in 3 attempts")

    def restart(self) -> None:
        """Starts the killed server again, empty, on the same port (the
        governor under test names it in its URL)."""
        assert self._spawn(), f"port {self.port} was taken before the restart"

    def _spawn(self) -> bool:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--loglevel", "notice", *self.extra]
        self.process = subprocess.Popen([self.binary, *args], stdout=subprocess.PIPE, text=True)
        lines: "queue.Queue[str | None]" = queue.Queue()
        threading.Thread(target=_drain, args=(self.process.stdout, lines), daemon=True).start()
        log: List[str] = []
        deadline = time.monotonic() + 10
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                pytest.fail(f"{self.binary} did not listen on {self.port} within 10 s:\n{''.join(log)}")
            if line is None:  # it exited
                self.process.wait(timeout=10)
                if "Address already in use" in "".join(log):
                    return False
                pytest.fail(f"{self.binary} exited ({self.process.returncode}) before listening:\n{''.join(log)}")
            if READY in line:
                return True
            log.append(line)

    def url(self, password: str = "") -> str:
        return f"redis://{':' + password + '@' if password else ''}127.0.0.1:{self.port}"

    def kill(self) -> None:
        self.process.kill()  # every key it held is gone
        self.process.wait(timeout=10)


def _drain(stdout: Any, lines: "queue.Queue[str | None]") -> None:
    """Passes the server's log on line by line, and keeps reading it (so the
    server never blocks on a full pipe) until it exits."""
    for line in stdout:
        lines.put(line)
    lines.put(None)


def test_redis_stopped_mid_run_falls_back_to_the_safe_share_then_recovers() -> None:
    server = PrivateServer()
    try:
        gov = RedisGovernor.from_toml(config(server.url(), "midrun", tokens=8000, processes=8), clock="manual")
        gov.try_acquire("p/shared", input_tokens=500, max_output_tokens=500).settle()  # 1000 of 8000 in Redis
        assert gov.health()["degraded"] is False

        server.kill()
        fallback = [gov.try_acquire("p/shared", input_tokens=50, max_output_tokens=50) for _ in range(10)]
        assert all(p.from_fallback for p in fallback), "the safe share: 8000 / 8 = 1000, ten of 100"
        with pytest.raises(llmgov.RateLimited):
            gov.try_acquire("p/shared", input_tokens=50, max_output_tokens=50)
        degraded = gov.health()
        assert degraded["degraded"] and degraded["fallback_admissions"] == 10

        server.restart()  # back, with every key lost
        gov.advance(1000)  # retry_interval: the next call probes Redis
        back = gov.try_acquire("p/shared", input_tokens=50, max_output_tokens=50)
        assert not back.from_fallback
        health = gov.health()
        assert (health["degraded"], health["recoveries"], health["state_resets"]) == (False, 1, 1)
        # The lost state restarted at the safe share (1000), not a full bucket of 8000.
        admitted = 1
        while True:
            try:
                gov.try_acquire("p/shared", input_tokens=50, max_output_tokens=50)
            except llmgov.RateLimited:
                break
            admitted += 1
            assert admitted <= 80, "a lost state must not restart as a full bucket"
        assert admitted == 10, admitted
    finally:
        server.kill()


def test_auth_with_requirepass_and_tls_urls_are_taken() -> None:
    server = PrivateServer("--requirepass", "s3cret-pw")
    try:
        good = RedisGovernor.from_toml(config(server.url("s3cret-pw"), "auth"), clock="manual")
        assert not good.try_acquire("p/shared", input_tokens=1).from_fallback
        wrong = RedisGovernor.from_toml(config(server.url("wrong-pw"), "auth"), clock="manual")
        assert wrong.try_acquire("p/shared", input_tokens=1).from_fallback
        health = wrong.health()
        assert health["degraded"] and health["last_error"]
        assert "wrong-pw" not in health["last_error"] and "wrong-pw" not in repr(wrong)
    finally:
        server.kill()
    # The package is built with TLS: a rediss:// URL is taken (nothing listens, so the safe share answers).
    tls = RedisGovernor.from_toml(config(closed_port_url().replace("redis://", "rediss://"), "tls"), clock="manual")
    assert tls.try_acquire("p/shared", input_tokens=1).from_fallback
