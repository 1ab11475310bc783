"""Governed httpx transports: one line governs the OpenAI and Anthropic SDKs.

::

    import httpx, openai, llmgov
    from llmgov.httpx import AsyncGovernedTransport

    gov = llmgov.Governor.from_preset("openai-gpt-4o-tier1")
    client = openai.AsyncOpenAI(
        http_client=httpx.AsyncClient(transport=AsyncGovernedTransport(gov, paths="openai/org/gpt-4o")))

For each request the transport estimates the prompt's tokens from the request
JSON (exact BPE counts, or with `counting="fast"` the estimate, which needs no
BPE and is many times faster) and its `max_tokens`, reserves them, sends, and then
settles the permit from the response's usage (for streams, from the final
usage event as it passes; `include_usage=True` asks OpenAI for it). A usage
the governor refuses (none, a negative, non-integer or absurd count) never
fails a call the provider served: the permit is settled as estimated (a
stream's, with the output it carried). An error reading the body goes to the
caller after the permit is settled as estimated (a success status) or
refunded (a refusal): no permit is left pending. A 429 or
5xx answer is reported to the governor with its headers (so the provider
scopes hold off until the retry-after) and retried as the core's retry
advice says (`RetryPolicy`: the provider's retry-after, full jitter, a retry
budget); the SDK's own retries are then redundant (`max_retries=0`).

The OpenAI SDK accepts an `httpx` client; SDKs built on the `httpx2` fork
(the Anthropic SDK 2.x) take the same transports from `llmgov.httpx2`.

Each request waits for capacity in the governor's fair queue
(`Governor.acquire`; the sync transport blocks in `acquire_blocking`): it
leaves only when every limit on its route has room, so callers never see a
local refusal, only the queue's own: `DeadlineExceeded` past `deadline_ms`
(or the class's maximum wait), `QueueFull`, or `NeverFits` for a request
larger than a limit can ever hold. `klass` and `priority` place it in the
queue.

A `llmgov.redis.RedisGovernor` may govern them too, sharing its budget with
other processes: a request then sleeps and retries while a limit refuses
(waiters across processes are not queued, so `klass` and `priority` are
refused), and each answer is fed back into the route's local scopes.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import httpx

from ._llmgov import Governor, RedisGovernor
from ._transport import AsyncGoverned, Paths, SyncGoverned, _stream_types

_SYNC_STREAM, _ASYNC_STREAM = _stream_types(httpx)


class GovernedTransport(SyncGoverned, httpx.BaseTransport):
    """A governed wrapper of any sync httpx transport (default
    `httpx.HTTPTransport()`).

    Options: `paths` (fixed, or a function of the request and its JSON
    body), `klass` (traffic class), `include_usage` (ask OpenAI streams for
    their usage), `default_max_tokens` (reserved for requests that set no
    `max_tokens`), `retry` (a `RetryPolicy`), `counting` (`"exact"` or
    `"fast"`), `deadline_ms` and `priority` (for the wait in the queue)."""

    _http: Any = httpx
    _stream = _SYNC_STREAM

    def __init__(
        self, governor: Union[Governor, RedisGovernor], *, paths: Paths, transport: Optional[httpx.BaseTransport] = None, **options: Any
    ) -> None:
        SyncGoverned.__init__(self, governor, paths=paths, transport=transport, **options)


class AsyncGovernedTransport(AsyncGoverned, httpx.AsyncBaseTransport):
    """A governed wrapper of any async httpx transport (default
    `httpx.AsyncHTTPTransport()`); options as `GovernedTransport`."""

    _http: Any = httpx
    _stream = _ASYNC_STREAM

    def __init__(
        self, governor: Union[Governor, RedisGovernor], *, paths: Paths, transport: Optional[httpx.AsyncBaseTransport] = None, **options: Any
    ) -> None:
        AsyncGoverned.__init__(self, governor, paths=paths, transport=transport, **options)


__all__ = ["AsyncGovernedTransport", "GovernedTransport", "Paths"]
