"""Python processes sharing one budget through Redis and llmgov.redis.

8 worker processes (this file run as a script), released together, against
one Redis and one global limit:

- exact mode admits exactly the limit, not one more or one less;
- leased mode admits at most the limit (the stated bound with no process
  dying), and every worker gives back its unused lease, so a newcomer gets
  exactly the rest;
- a worker killed with SIGKILL holding a lease over-admits at most that
  lease (limit ÷ expected_processes), and its share returns within the lease
  TTL; one killed holding every concurrency slot has them back within the
  slot TTL;
- a worker that forks after using its governor (gunicorn ``--preload``,
  Celery's prefork pool): parent and child hold a slot each, the child keeps
  its own alive, returns no lease of its parent's, and exits cleanly.

Needs ``LLMGOV_REDIS_URL`` (``make test-redis-python`` starts a server);
skipped without it."""

from __future__ import annotations

import faulthandler
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

PROCESSES = 8
EXACT_LIMIT = 300
LEASED_LIMIT = 400
ATTEMPTS = {"exact": 100, "leased": 150}

CRASH_LIMIT = 100
CRASH_PROCESSES = 4
# Long enough that the doomed worker still holds its lease when a loaded
# machine runs the test late: its keeper gives an idle lease back once it is
# within a third of the TTL of lapsing, about 0.57 TTL (3.4 s) after the grant.
CRASH_TTL_S = 6
CRASH_USED = 20
LEASE_CAP = CRASH_LIMIT // CRASH_PROCESSES

SLOTS = 4
# Long enough that a holder whose heartbeat (every third of it) is delayed by
# a loaded machine still keeps its slots.
SLOT_TTL_S = 2
# The Redis I/O timeout: far above the 250 ms default, so a call slowed by a
# loaded machine is not taken for an outage (which would send the governor to
# its safe share and break the exact counts).
TIMEOUT = "2s"
# How long the test waits for a worker's next line before it takes the
# worker for hung: it dumps the worker's (and a forked child's) Python
# tracebacks, kills them and fails, instead of blocking the run.
WORKER_SILENCE_S = 60


def config(url: str, prefix: str, role: str) -> str:
    """The shared scope each worker role governs; a daily window refills
    nothing over the test, so the count admitted is the bucket."""
    role = {"fork-slots": "slots", "fork-lease": "crash"}.get(role, role)
    if role == "slots":
        limits = f'{{ dimension = "concurrency", amount = {SLOTS} }}'
        redis = f'expected_processes = 2\nslot_ttl = "{SLOT_TTL_S}s"'
        mode = "exact"
    else:
        limit, processes, mode = {
            "exact": (EXACT_LIMIT, PROCESSES, "exact"),
            "leased": (LEASED_LIMIT, PROCESSES, "leased"),
            "crash": (CRASH_LIMIT, CRASH_PROCESSES, "leased"),
        }[role]
        limits = f'{{ dimension = "requests", amount = {limit}, window = "1d" }}'
        redis = f'expected_processes = {processes}\nlease_ttl = "{CRASH_TTL_S}s"'
    return f"""
[scopes."openai/org/gpt-4o"]
limits = [{limits}, {{ dimension = "tokens", amount = 100000000, window = "1d" }}]
[scopes."tenants/*"]
limits = [{{ dimension = "requests", amount = 100000, window = "1m" }}]
[redis]
url = "{url}"
prefix = "{prefix}"
timeout = "{TIMEOUT}"
{redis}
[redis.scopes."openai/org/gpt-4o"]
mode = "{mode}"
"""


ROUTE = ["tenants/worker", "openai/org/gpt-4o"]


def report(line: str) -> None:
    """Writes one line to the test in a single write(2): a forked parent and
    child share the pipe, and `print` under PYTHONUNBUFFERED writes the text
    and its newline apart, so their lines could merge into one."""
    os.write(1, f"{line}\n".encode())


def drain(gov, attempts: int) -> int:  # type: ignore[no-untyped-def]
    """Acquires and settles until refused, at most `attempts` times."""
    import llmgov

    admitted = 0
    for _ in range(attempts):
        try:
            permit = gov.try_acquire(ROUTE, input_tokens=100, max_output_tokens=50)
        except llmgov.RateLimited as refused:
            assert refused.dimension == "requests", refused
            continue
        admitted += 1
        permit.settle(output_tokens=20)
    return admitted


def forking_worker(role: str, gov) -> None:  # type: ignore[no-untyped-def]
    """Uses the governor, forks, and reports from both sides on stdout. The
    child ends as a process does (its governor dropped on the way out), its
    stderr in the file CHILD_STDERR names."""
    if role == "fork-slots":
        gov.try_acquire(ROUTE, input_tokens=1).settle()  # a pooled connection, a slot id used
    else:
        assert drain(gov, CRASH_USED) == CRASH_USED  # leases 1, 2, 4, 8 then 16 of which 11 unused
    child = os.fork()
    if child == 0:
        with open(os.environ["CHILD_STDERR"], "w") as stderr:
            os.dup2(stderr.fileno(), 2)
        if role == "fork-slots":
            held = gov.try_acquire(ROUTE, input_tokens=1)
            report("child_held=1")
            sys.stdin.readline()  # until the test has looked, past the slot TTL
            held.cancel()
        return  # the governor is dropped here: it must not return its parent's lease
    if role == "fork-slots":
        mine = gov.try_acquire(ROUTE, input_tokens=1)
        report("parent_held=1")
        _, status = os.waitpid(child, 0)
        mine.cancel()
    else:
        _, status = os.waitpid(child, 0)
        admitted = CRASH_USED + drain(gov, 2 * CRASH_LIMIT)
        gov.return_leases()
        report(f"admitted={admitted}")
    report(f"child_status={status}")


def worker(role: str) -> None:
    """A worker process: builds its governor, says `ready`, waits for `go`
    on stdin, then runs its role and prints what it admitted."""
    from llmgov.redis import RedisGovernor

    # SIGUSR1 (sent by the test to a hung worker) dumps every thread's
    # traceback to stderr; a forked child inherits it, with its stderr file.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    gov = RedisGovernor.from_toml(config(os.environ["LLMGOV_REDIS_URL"], os.environ["PREFIX"], role))
    report("ready")
    sys.stdin.readline()
    if role.startswith("fork-"):
        forking_worker(role, gov)
        return
    if role in ATTEMPTS:
        admitted = drain(gov, ATTEMPTS[role])
        health = gov.health()
        assert not health["degraded"] and health["fallback_admissions"] == 0, health
        gov.return_leases()
        report(f"admitted={admitted} calls={health['redis_calls']}")
        return
    held = []
    count = CRASH_USED if role == "crash" else SLOTS
    for _ in range(count):
        permit = gov.try_acquire(ROUTE, input_tokens=100, max_output_tokens=50)
        if role == "crash":
            permit.settle(output_tokens=20)
        else:
            held.append(permit)  # kept in flight until the process is killed
    report(f"admitted={count}")
    time.sleep(120)  # killed by the test long before


if __name__ == "__main__":
    worker(sys.argv[1])
    sys.exit(0)


import pytest  # noqa: E402  (the workers above need only llmgov)



def redis_url() -> str:
    url = os.environ.get("LLMGOV_REDIS_URL", "")
    if not url:
        pytest.skip("LLMGOV_REDIS_URL is not set (run `make test-redis-python`, which starts a redis-server)")
    return url


def fresh_prefix(test: str) -> str:
    return f"py-{test}-{os.getpid()}-{time.time_ns()}"


def spawn(role: str, url: str, prefix: str) -> subprocess.Popen:  # type: ignore[type-arg]
    env = dict(os.environ, LLMGOV_REDIS_URL=url, PREFIX=prefix)
    process = subprocess.Popen(
        [sys.executable, __file__, role],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
        start_new_session=True,  # its own process group, with any child it forks
    )
    line = (next_line(process) or "").strip()
    if line != "ready":
        process.kill()
        pytest.fail(f"worker {role} did not start: {line!r}")
    return process


def next_line(process: subprocess.Popen) -> Optional[str]:  # type: ignore[type-arg]
    """The worker's next line on stdout (None once it is closed), read by a
    thread so that the wait has a deadline: a worker silent for
    WORKER_SILENCE_S is hung, and `fail_hung` ends it."""
    lines: "Optional[queue.Queue[Optional[str]]]" = getattr(process, "lines", None)
    if lines is None:
        lines = queue.Queue()
        assert process.stdout is not None
        stdout = process.stdout

        def pump() -> None:
            for line in stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        setattr(process, "lines", lines)
    try:
        return lines.get(timeout=WORKER_SILENCE_S)
    except queue.Empty:
        fail_hung(process)
        raise


def fail_hung(process: subprocess.Popen) -> None:  # type: ignore[type-arg]
    """Dumps the tracebacks of the worker's process group (the worker's on
    this test's stderr, a forked child's in its stderr file), kills the
    group and fails the test with what the child wrote."""
    os.killpg(process.pid, signal.SIGUSR1)
    try:
        process.wait(timeout=2)  # time to write the tracebacks; it will not exit
    except subprocess.TimeoutExpired:
        pass
    os.killpg(process.pid, signal.SIGKILL)
    child_stderr = getattr(process, "child_stderr", None)
    child = Path(child_stderr).read_text() if child_stderr and Path(child_stderr).exists() else ""
    pytest.fail(f"worker printed nothing for {WORKER_SILENCE_S} s; its tracebacks are on stderr, its child's:\n{child}")


def release(workers: List[subprocess.Popen]) -> None:  # type: ignore[type-arg]
    """Sends `go` to every worker at once, so they contend for the limit."""
    for process in workers:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()


def value(process: subprocess.Popen, key: str) -> str:  # type: ignore[type-arg]
    for line in iter(lambda: next_line(process), None):
        if line.startswith(f"{key}="):
            return line.split()[0].split("=", 1)[1]
    process.wait(timeout=30)
    pytest.fail(f"worker exited ({process.returncode}) without printing {key}=")


def run_workers(role: str, url: str, prefix: str) -> int:
    workers = [spawn(role, url, prefix) for _ in range(PROCESSES)]
    release(workers)
    admitted = sum(int(value(w, "admitted")) for w in workers)
    for process in workers:
        assert process.wait(timeout=60) == 0
    return admitted


def test_eight_python_processes_admit_exactly_the_global_limit_in_exact_mode() -> None:
    from llmgov.redis import RedisGovernor

    url, prefix = redis_url(), fresh_prefix("exact8")
    assert PROCESSES * ATTEMPTS["exact"] > EXACT_LIMIT, "the workers must ask for more than the limit"
    admitted = run_workers("exact", url, prefix)
    assert admitted == EXACT_LIMIT, f"exact mode admits the limit, not one more or less: {admitted}"
    newcomer = RedisGovernor.from_toml(config(url, prefix, "exact"))
    assert drain(newcomer, 10) == 0, "the bucket is empty for everyone"


def test_eight_python_processes_stay_within_the_limit_in_leased_mode() -> None:
    from llmgov.redis import RedisGovernor

    url, prefix = redis_url(), fresh_prefix("leased8")
    admitted = run_workers("leased", url, prefix)
    assert admitted <= LEASED_LIMIT, f"no process died: leased mode admits at most the limit, got {admitted}"
    assert admitted >= LEASED_LIMIT // 2, f"leases serve most of the limit, got {admitted}"
    newcomer = RedisGovernor.from_toml(config(url, prefix, "leased"))
    rest = drain(newcomer, 2 * LEASED_LIMIT)
    print(f"leased, 8 Python processes: {admitted} admitted by the workers, {rest} left for a newcomer")
    assert admitted + rest == LEASED_LIMIT, f"unused leases came back: {admitted} + {rest}"


def test_a_killed_python_process_over_admits_at_most_its_lease_and_its_share_returns() -> None:
    from llmgov.redis import RedisGovernor

    url, prefix = redis_url(), fresh_prefix("leased-kill")
    holder = spawn("crash", url, prefix)
    release([holder])
    assert int(value(holder, "admitted")) == CRASH_USED
    os.kill(holder.pid, signal.SIGKILL)  # with a lease outstanding
    holder.wait(timeout=10)

    gov = RedisGovernor.from_toml(config(url, prefix, "crash"))
    before_ttl = drain(gov, 2 * CRASH_LIMIT)
    assert before_ttl < CRASH_LIMIT - CRASH_USED, f"the dead process's lease is still out: {before_ttl}"
    after_ttl = 0
    deadline = time.monotonic() + 3 * CRASH_TTL_S  # Redis expires the lease on its own clock
    while before_ttl + after_ttl < CRASH_LIMIT - CRASH_USED and time.monotonic() < deadline:
        time.sleep(0.2)
        after_ttl += drain(gov, CRASH_LIMIT)
    total = CRASH_USED + before_ttl + after_ttl
    print(f"leased, killed holder: {CRASH_USED} by it, {before_ttl} before its lease expired, {after_ttl} after")
    assert after_ttl > 0, "the killed process's share came back"
    assert CRASH_LIMIT <= total <= CRASH_LIMIT + LEASE_CAP, f"the stated bound: limit + one lease; {total}"


def test_a_killed_python_process_gives_its_concurrency_slots_back_within_the_ttl() -> None:
    import llmgov
    from llmgov.redis import RedisGovernor

    url, prefix = redis_url(), fresh_prefix("slots-kill")
    holder = spawn("slots", url, prefix)
    release([holder])
    assert int(value(holder, "admitted")) == SLOTS
    gov = RedisGovernor.from_toml(config(url, prefix, "slots"))
    time.sleep(1.5 * SLOT_TTL_S)  # the holder's heartbeat keeps its slots past the TTL
    with pytest.raises(llmgov.RateLimited) as full:
        gov.try_acquire(ROUTE, input_tokens=1)
    assert full.value.dimension == "concurrency"
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=10)
    deadline = time.monotonic() + 3 * SLOT_TTL_S
    while True:
        try:
            gov.try_acquire(ROUTE, input_tokens=1).settle()
            break
        except llmgov.RateLimited:
            assert time.monotonic() < deadline, "the killed worker's slots did not come back"
            time.sleep(0.1)


def spawn_forking(role: str, url: str, prefix: str, stderr: Path) -> subprocess.Popen:  # type: ignore[type-arg]
    os.environ["CHILD_STDERR"] = str(stderr)
    try:
        process = spawn(role, url, prefix)
    finally:
        del os.environ["CHILD_STDERR"]
    setattr(process, "child_stderr", str(stderr))
    return process


def values(process: subprocess.Popen, keys: List[str]) -> Dict[str, str]:  # type: ignore[type-arg]
    """Reads lines until every `key=` was printed, in whatever order."""
    found: Dict[str, str] = {}
    for line in iter(lambda: next_line(process), None):
        key, _, rest = line.strip().partition("=")
        if key in keys:
            found[key] = rest
            if len(found) == len(keys):
                return found
    process.wait(timeout=30)
    pytest.fail(f"worker exited ({process.returncode}) with only {found}")


def test_a_forked_child_takes_slots_of_its_own_and_keeps_them_alive(tmp_path: Path) -> None:
    """Before: parent and child took one slot id for two requests in flight
    (3 more admitted of 4, not 2), and the child panicked at exit (joining a
    keeper thread that stayed in the parent)."""
    import llmgov
    from llmgov.redis import RedisGovernor

    url, prefix, stderr = redis_url(), fresh_prefix("fork-slots"), tmp_path / "child.stderr"
    worker = spawn_forking("fork-slots", url, prefix, stderr)
    release([worker])
    assert values(worker, ["child_held", "parent_held"]) == {"child_held": "1", "parent_held": "1"}
    gov = RedisGovernor.from_toml(config(url, prefix, "slots"))

    def free_slots() -> int:
        taken = []
        try:
            while len(taken) < SLOTS:
                taken.append(gov.try_acquire(ROUTE, input_tokens=1))
        except llmgov.RateLimited as full:
            assert full.dimension == "concurrency", full
        for permit in taken:
            permit.cancel()
        return len(taken)

    assert free_slots() == SLOTS - 2, "parent and child hold one slot each"
    time.sleep(1.5 * SLOT_TTL_S)  # past the TTL of the child's slot, had nobody refreshed it
    assert free_slots() == SLOTS - 2, "the child's own keeper keeps its slot alive"
    release([worker])  # the child lets go and ends
    assert values(worker, ["child_status"]) == {"child_status": "0"}
    assert worker.wait(timeout=30) == 0
    assert "panicked" not in stderr.read_text(), stderr.read_text()


def test_a_forked_child_returns_no_lease_of_its_parents(tmp_path: Path) -> None:
    """Before: the child's exit gave back the parent's lease (11 unused),
    which the parent went on serving: 111 admitted of 100."""
    from llmgov.redis import RedisGovernor

    url, prefix, stderr = redis_url(), fresh_prefix("fork-lease"), tmp_path / "child.stderr"
    worker = spawn_forking("fork-lease", url, prefix, stderr)
    release([worker])
    reported = values(worker, ["admitted", "child_status"])
    assert reported["child_status"] == "0"
    assert worker.wait(timeout=30) == 0
    assert "panicked" not in stderr.read_text(), stderr.read_text()
    rest = drain(RedisGovernor.from_toml(config(url, prefix, "crash")), 2 * CRASH_LIMIT)
    admitted = int(reported["admitted"])
    assert admitted + rest <= CRASH_LIMIT, f"the parent's lease was given back twice: {admitted} + {rest}"
