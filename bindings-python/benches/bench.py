"""Python benchmarks, all peers in one run (`make bench-python`, release build).

1. The admission round trip from Python: reserve, then reconcile, for one
   request on an RPM + TPM pair of limits, against aiolimiter, limits,
   pyrate-limiter and the seed article's pure-Python deque limiter.
2. `count_tokens` against the `tiktoken` package on the same texts, its
   o200k vocabulary loaded from the file inside the tiktoken-rs crate (so
   nothing is downloaded).

Prints Markdown tables of medians of CPU time (the round trips over 9
interleaved rounds, counting over 7 alternating repeats) and ratios to
llmgov.
"""

from __future__ import annotations

import asyncio
import glob
import os
import platform
import statistics
import sys
import time
from collections import deque
from importlib import metadata
from typing import Callable, Dict, List, Tuple

import llmgov

REPEATS = 7
ROUNDS = 9  # of the round-trip table, interleaved
ROUND_TRIPS = 50_000
HUGE = 1 << 50  # limits that never refuse during the run


def interleaved(ours: Callable[[int], None], theirs: Callable[[int], None], n: int) -> Tuple[float, float]:
    """Median CPU nanoseconds per operation of `ours(n)` and `theirs(n)`,
    alternated REPEATS times so that a change in the machine's load weighs on
    both alike. CPU time of this process, not wall time, so that other load
    on a shared machine counts less (every library here runs on the calling
    thread; counting long texts with the GIL released stays on it too)."""
    samples: Tuple[List[float], List[float]] = ([], [])
    for _ in range(REPEATS):
        for run, into in ((ours, samples[0]), (theirs, samples[1])):
            start = time.process_time_ns()
            run(n)
            into.append((time.process_time_ns() - start) / n)
    return statistics.median(samples[0]), statistics.median(samples[1])


# --- 1. the round trip ------------------------------------------------------


def round_trip_governor() -> llmgov.Governor:
    """RPM + TPM on one provider scope, never refusing during the run."""
    return llmgov.Governor.from_dict(
        {
            "scopes": {
                "openai/org/gpt-4o": {
                    "limits": [
                        {"dimension": "requests", "amount": HUGE, "window": "1m"},
                        {"dimension": "tokens", "amount": HUGE, "window": "1m"},
                    ]
                }
            }
        }
    )


def llmgov_round_trip(style: str) -> Callable[[int], None]:
    """`style`: "positional" (`try_acquire(route, 1000, 200)` then
    `settle(1000, 150)`), "keywords" (the same by keyword, on the Route) or
    "path" (by keyword, naming the path string instead of a Route)."""
    gov = round_trip_governor()
    paths = "openai/org/gpt-4o" if style == "path" else gov.route("openai/org/gpt-4o")

    def positional(n: int) -> None:
        acquire = gov.try_acquire
        for _ in range(n):
            permit = acquire(paths, 1000, 200)
            permit.settle(1000, 150)

    def keywords(n: int) -> None:
        acquire = gov.try_acquire
        for _ in range(n):
            permit = acquire(paths, input_tokens=1000, max_output_tokens=200)
            permit.settle(input_tokens=1000, output_tokens=150)

    return positional if style == "positional" else keywords


class SeedLimiter:
    """The seed article's RPM + TPM limiter (a deque of the last 60 s), its
    token estimate passed in rather than counted."""

    def __init__(self, max_rpm: int, max_tpm: int) -> None:
        self.max_rpm, self.max_tpm = max_rpm, max_tpm
        self.request_history: deque = deque()
        self.total_tokens = 0

    def _cleanup(self, now: float) -> None:
        while self.request_history and now - self.request_history[0][0] > 60:
            _, tokens = self.request_history.popleft()
            self.total_tokens -= tokens

    def allow(self, estimated: int) -> bool:
        now = time.time()
        self._cleanup(now)
        if len(self.request_history) < self.max_rpm and self.total_tokens + estimated <= self.max_tpm:
            self.request_history.append((now, estimated))
            self.total_tokens += estimated
            return True
        return False

    def record_actual(self, actual_tokens: int, estimated_tokens: int) -> None:
        self.total_tokens += actual_tokens - estimated_tokens


def seed_round_trip() -> Callable[[int], None]:
    limiter = SeedLimiter(HUGE, HUGE)

    def run(n: int) -> None:
        for _ in range(n):
            assert limiter.allow(1200)
            limiter.record_actual(1150, 1200)

    return run


def limits_round_trip() -> Callable[[int], None]:
    from limits import parse, storage, strategies

    limiter = strategies.SlidingWindowCounterRateLimiter(storage.MemoryStorage())
    rpm, tpm = parse(f"{HUGE}/minute"), parse(f"{HUGE}/minute")

    def run(n: int) -> None:
        hit = limiter.hit
        for _ in range(n):
            assert hit(rpm, "rpm") and hit(tpm, "tpm", cost=1200)

    return run


def pyrate_round_trip() -> Callable[[int], None]:
    from pyrate_limiter import Duration, InMemoryBucket, Limiter, Rate

    # One bucket per dimension, as pyrate-limiter weighs items in one unit.
    requests = Limiter(InMemoryBucket([Rate(10**9, Duration.MINUTE)]))
    tokens = Limiter(InMemoryBucket([Rate(10**12, Duration.MINUTE)]))

    def run(n: int) -> None:
        for _ in range(n):
            assert requests.try_acquire("rpm", 1, blocking=False) and tokens.try_acquire("tpm", 1200, blocking=False)

    return run


def llmgov_async_round_trip() -> Callable[[int], None]:
    """`permit = await gov.acquire(route, 1000, 200)` then `settle`, in one
    task on an asyncio loop: the waiting API, admitted at once (the queue's
    fast path), against aiolimiter's."""
    gov = round_trip_governor()
    route = gov.route("openai/org/gpt-4o")
    loop = asyncio.new_event_loop()

    async def many(n: int) -> None:
        acquire = gov.acquire
        for _ in range(n):
            permit = await acquire(route, 1000, 200)
            permit.settle(1000, 150)

    def run(n: int) -> None:
        loop.run_until_complete(many(n))

    return run


def aiolimiter_round_trip() -> Callable[[int], None]:
    from aiolimiter import AsyncLimiter

    loop = asyncio.new_event_loop()
    requests = AsyncLimiter(HUGE, 60)
    tokens = AsyncLimiter(HUGE, 60)

    async def many(n: int) -> None:
        for _ in range(n):
            await requests.acquire()
            await tokens.acquire(1200)

    def run(n: int) -> None:
        loop.run_until_complete(many(n))

    return run


# --- 2. counting -------------------------------------------------------------


def tiktoken_o200k():
    """tiktoken's o200k_base Encoding built from the vocabulary file shipped in
    the tiktoken-rs crate, instead of downloading it."""
    import tiktoken
    import tiktoken_ext.openai_public as public
    from tiktoken.load import load_tiktoken_bpe

    home = os.path.expanduser("~/.cargo/registry/src")
    files = sorted(glob.glob(f"{home}/*/tiktoken-rs-*/assets/o200k_base.tiktoken"))
    if not files:
        sys.exit("no o200k_base.tiktoken under ~/.cargo/registry/src/*/tiktoken-rs-*/assets (run `cargo build` first)")
    local = files[-1]
    public.load_tiktoken_bpe = lambda *_args, **_kwargs: load_tiktoken_bpe(local)
    return tiktoken.Encoding(**public.o200k_base())


def texts() -> Dict[str, str]:
    prose = (
        "Rate limits are restrictions that an API imposes on the number of times a user or client can access "
        "the server within a specified period of time. They protect against abuse, ensure fair access, and "
        "let the provider manage the aggregate load on its infrastructure. "
    )
    code = (
        "def fibonacci(n: int) -> int:\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
        "    return a\n\nprint([fibonacci(i) for i in range(20)])\n"
    )
    mixed = "Le modèle répond en 日本語 et en English; émojis 🚀✨, nombres 3.14159 et URLs https://example.com/a?b=c. "
    return {
        "chat message (60 B)": "Summarise the rate-limit headers OpenAI sends, in one line.",
        "prose (1 KB)": (prose * 5)[:1000],
        "prose (100 KB)": (prose * 400)[:100_000],
        "code (20 KB)": (code * 120)[:20_000],
        "multilingual (10 KB)": (mixed * 100)[:10_000],
    }


def counting_rows() -> List[Tuple[str, float, float, int, int]]:
    enc = tiktoken_o200k()
    rows = []
    for name, text in texts().items():
        n = max(10, 1_000_000 // max(len(text), 1))
        ours = llmgov.count_tokens(text, model="gpt-4o")
        theirs = len(enc.encode_ordinary(text))
        ns_ours, ns_theirs = interleaved(
            lambda k: [llmgov.count_tokens(text, model="gpt-4o") for _ in range(k)],
            lambda k: [enc.encode_ordinary(text) for _ in range(k)],
            n,
        )
        rows.append((name, ns_ours, ns_theirs, ours, theirs))
    return rows


def main() -> None:
    print(f"llmgov {llmgov.__version__}, Python {platform.python_version()}, {platform.machine()}")
    print(f"load average at start: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} CPUs")
    print()
    print("| round trip (reserve + reconcile, RPM + TPM) | ns/op | × llmgov |")
    print("|---|---:|---:|")
    peers = [
        ("llmgov try_acquire + settle (Route, positional)", llmgov_round_trip("positional")),
        ("llmgov try_acquire + settle (Route, keywords)", llmgov_round_trip("keywords")),
        ("llmgov try_acquire + settle (path str, keywords)", llmgov_round_trip("path")),
        ("seed article deque limiter (pure Python)", seed_round_trip()),
        ("limits SlidingWindowCounter hit × 2", limits_round_trip()),
        ("pyrate-limiter try_acquire × 2", pyrate_round_trip()),
        ("llmgov await acquire + settle (Route, positional, asyncio)", llmgov_async_round_trip()),
        ("aiolimiter acquire × 2 (asyncio)", aiolimiter_round_trip()),
    ]
    # Interleaved: each of ROUNDS rounds times every peer once, so a change
    # in the machine's load during the run weighs on all of them alike.
    samples: Dict[str, List[float]] = {name: [] for name, _ in peers}
    for name, run in peers:
        run(1000)  # warm up
    for _ in range(ROUNDS):
        for name, run in peers:
            n = ROUND_TRIPS if "pyrate" not in name else ROUND_TRIPS // 10
            start = time.process_time_ns()
            run(n)
            samples[name].append((time.process_time_ns() - start) / n)
    base = statistics.median(samples[peers[0][0]])
    for name, _ in peers:
        ns = statistics.median(samples[name])
        print(f"| {name} | {ns:,.0f} | {ns / base:.2f} |")
    print()
    print("| count_tokens (o200k) | llmgov µs | tiktoken µs | tiktoken ÷ llmgov | tokens (llmgov / tiktoken) |")
    print("|---|---:|---:|---:|---|")
    for name, ours, theirs, n_ours, n_theirs in counting_rows():
        print(f"| {name} | {ours / 1000:,.2f} | {theirs / 1000:,.2f} | {theirs / ours:.2f} | {n_ours} / {n_theirs} |")
    print()
    print(f"load average at end: {os.getloadavg()[0]:.1f} (1 min)")
    versions = ", ".join(f"{p} {metadata.version(p)}" for p in ("aiolimiter", "limits", "pyrate-limiter", "tiktoken"))
    print(f"peers: {versions}")


if __name__ == "__main__":
    main()
