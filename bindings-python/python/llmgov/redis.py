"""One budget shared by many processes, through Redis (7+) or Valkey.

The scopes named under ``[redis.scopes]`` are enforced in Redis, in
``exact`` mode (one Lua script per acquire and per settle: never one request
past the limit) or ``leased`` mode (each process leases slices of the limit
and admits from them locally; over-admission is at most the leases of
processes that die holding them). Every other scope stays local to the
process. While Redis is unreachable the shared scopes admit from a safe
local share, each limit ÷ ``expected_processes``; ``health()`` says so::

    from llmgov.redis import RedisGovernor

    gov = RedisGovernor.from_toml('''
        [scopes."openai/org/gpt-4o"]
        limits = [{ dimension = "requests", amount = 500, window = "1m" }]
        [redis]
        # url = "redis://127.0.0.1:6379"  # left out: read from LLMGOV_REDIS_URL
        prefix = "prod-eu"
        expected_processes = 8
        [redis.scopes."openai/org/gpt-4o"]
        mode = "exact"
    ''')
    with gov.try_acquire("openai/org/gpt-4o", input_tokens=1200, max_output_tokens=300) as permit:
        ...  # call the provider, then permit.settle(response.usage)
    assert not gov.health()["degraded"]

The engine is the Rust crate ``llmgov-redis``, compiled into ``llmgov._llmgov``.

``acquire_blocking(..., timeout=)`` and ``await acquire(..., deadline_ms=)``
wait while a limit refuses: they sleep until the refusing limit could admit
the request (Redis's GCRA says when) and try again. Waiters are not
queued across processes; whoever tries first after capacity returns takes it.

The acquires take the local ``Governor``'s ``klass=``, ``priority=`` and
``expected_output_tokens=`` as None (code written for either runs on both)
and refuse a value for them by name: shared scopes have no traffic classes,
waiters are not queued, and ``max_output_tokens`` is what is reserved.

``RedisPermit.report(status, headers, body)`` (or a response, as
``Permit.report`` takes) feeds the provider's answer back into the route's
local scopes (a 429's ``retry-after`` holds them; AIMD and the breaker
learn) and returns its classification; a 429 also holds the route's shared
provider scopes (``provider = true``) empty in Redis, for every process,
until its retry-after, as a circuit breaker the answer opens there does for
its pause. So the httpx transports (``llmgov.httpx.GovernedTransport`` and
friends) take a ``RedisGovernor`` as they take a local one, less ``klass=``
and ``priority=``, which they refuse by name when built.
"""

from ._llmgov import AlreadyReconciled, RedisGovernor, RedisPermit, RedisRoute

__all__ = ["AlreadyReconciled", "RedisGovernor", "RedisPermit", "RedisRoute"]
