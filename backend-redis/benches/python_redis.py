"""The Redis backend from Python (`make bench-redis-python`, release build).

One acquire + settle of a request (1200 input tokens, 300 `max_tokens`,
settled at 120 output) on one scope with a requests and a tokens limit so
large nothing is refused, through the `llmgov` package:

- `llmgov.Governor`, the local core (no Redis);
- `llmgov.redis.RedisGovernor`, leased mode (admits from its lease);
- `llmgov.redis.RedisGovernor`, exact mode (a script per acquire and per settle);
- the peer: redis-py running a per-request fixed window of the kind
  LiteLLM's proxy runs (`backend-redis/lua/fixed_window.lua`, the script the
  Rust bench uses: one script per request, then `INCRBY` of the actual
  tokens), which is what a Python service doing it by hand pays.

The four run in alternating rounds, so each round sees the same machine
load; wall time (the Redis round trips are waits, not CPU). Prints a
Markdown table of per-operation medians, the median of the round ratios
to the fixed window, and leased mode's Redis calls per acquire.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Callable, Dict, List

import redis as redis_py

import llmgov
from llmgov.redis import RedisGovernor

ROUNDS = int(os.environ.get("ROUNDS", "21"))
BATCH = int(os.environ.get("BATCH", "500"))
HUGE = 1 << 40
LUA = Path(__file__).resolve().parents[1] / "lua" / "fixed_window.lua"

SCOPE = f"""
[scopes."openai/org/gpt-4o"]
limits = [
  {{ dimension = "requests", amount = {HUGE}, window = "1m" }},
  {{ dimension = "tokens", amount = {HUGE}, window = "1m" }},
]
"""


def shared(mode: str) -> RedisGovernor:
    prefix = f"bench-py-{mode}-{os.getpid()}-{time.time_ns()}"
    redis_section = f"""
[redis]
prefix = "{prefix}"
expected_processes = 8
[redis.scopes."openai/org/gpt-4o"]
mode = "{mode}"
"""
    return RedisGovernor.from_toml(SCOPE + redis_section)


def governed(gov) -> Callable[[int], None]:  # type: ignore[no-untyped-def]
    route = gov.route("openai/org/gpt-4o")

    def run(n: int) -> None:
        for _ in range(n):
            gov.try_acquire(route, input_tokens=1200, max_output_tokens=300).settle(output_tokens=120)

    return run


def fixed_window(url: str) -> Callable[[int], None]:
    client = redis_py.Redis.from_url(url)
    script = client.register_script(LUA.read_text())
    keys = ["{bench:pyfw}:w:requests", "{bench:pyfw}:c:requests", "{bench:pyfw}:w:tokens", "{bench:pyfw}:c:tokens"]

    def run(n: int) -> None:
        for _ in range(n):
            counts = script(keys=keys, args=[int(time.time()), 60])
            assert int(counts[1]) <= HUGE and int(counts[3]) <= HUGE
            client.incrby(keys[3], 1200 + 120)

    return run


def main() -> None:
    url = os.environ["LLMGOV_REDIS_URL"]
    leased = shared("leased")
    contenders: Dict[str, Callable[[int], None]] = {
        "llmgov local core (`Governor`, no Redis)": governed(llmgov.Governor.from_toml(SCOPE)),
        "llmgov leased (`RedisGovernor`)": governed(leased),
        "llmgov exact (`RedisGovernor`: acquire script + settle script)": governed(shared("exact")),
        "LiteLLM-style fixed window (redis-py: script + `INCRBY`)": fixed_window(url),
    }
    peer = list(contenders)[-1]
    for run in contenders.values():
        run(50)  # warm: scripts loaded, connections open, first lease taken
    calls_before = leased.health()["redis_calls"]
    samples: Dict[str, List[float]] = {name: [] for name in contenders}
    for _ in range(ROUNDS):
        for name, run in contenders.items():
            start = time.perf_counter_ns()
            run(BATCH)
            samples[name].append((time.perf_counter_ns() - start) / BATCH)
    leased_calls = leased.health()["redis_calls"] - calls_before
    leased_acquires = ROUNDS * BATCH

    print(f"Python {platform.python_version()}, llmgov {llmgov.__version__}, redis-py {metadata.version('redis')}")
    print(f"{ROUNDS} alternating rounds of {BATCH} acquire + settle each; wall time\n")
    print("| | median per acquire + settle | median round ratio to the fixed window |")
    print("|---|---|---|")
    for name, values in samples.items():
        ratios = [mine / theirs for mine, theirs in zip(values, samples[peer])]
        print(f"| {name} | {statistics.median(values) / 1000:.1f} µs | {statistics.median(ratios):.3f} |")
    per_acquire = leased_calls / leased_acquires
    print(f"\nleased mode: {leased_calls} Redis calls for {leased_acquires} acquires = {per_acquire:.5f} per acquire")
    leased.return_leases()


if __name__ == "__main__":
    sys.exit(main())
