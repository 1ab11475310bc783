"""The governed transports of `llmgov.httpx`, for `httpx2`, the fork of
httpx that the Anthropic SDK 2.x (and the OpenAI SDK 3.x by default) use::

    import anthropic, httpx2, llmgov
    from llmgov.httpx2 import AsyncGovernedTransport

    client = anthropic.AsyncAnthropic(
        http_client=httpx2.AsyncClient(transport=AsyncGovernedTransport(gov, paths="anthropic/org/claude")))
"""

from __future__ import annotations

from typing import Any, Optional, Union

import httpx2

from ._llmgov import Governor, RedisGovernor
from ._transport import AsyncGoverned, Paths, SyncGoverned, _stream_types

_SYNC_STREAM, _ASYNC_STREAM = _stream_types(httpx2)


class GovernedTransport(SyncGoverned, httpx2.BaseTransport):
    """A governed wrapper of any sync httpx2 transport; see `llmgov.httpx.GovernedTransport`."""

    _http: Any = httpx2
    _stream = _SYNC_STREAM

    def __init__(
        self, governor: Union[Governor, RedisGovernor], *, paths: Paths, transport: Optional[httpx2.BaseTransport] = None, **options: Any
    ) -> None:
        SyncGoverned.__init__(self, governor, paths=paths, transport=transport, **options)


class AsyncGovernedTransport(AsyncGoverned, httpx2.AsyncBaseTransport):
    """A governed wrapper of any async httpx2 transport; see `llmgov.httpx.GovernedTransport`."""

    _http: Any = httpx2
    _stream = _ASYNC_STREAM

    def __init__(
        self, governor: Union[Governor, RedisGovernor], *, paths: Paths, transport: Optional[httpx2.AsyncBaseTransport] = None, **options: Any
    ) -> None:
        AsyncGoverned.__init__(self, governor, paths=paths, transport=transport, **options)


__all__ = ["AsyncGovernedTransport", "GovernedTransport", "Paths"]
