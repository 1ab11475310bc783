"""The governed transports, written once for `httpx` and its fork `httpx2`
(which the newer OpenAI and Anthropic SDKs use): `llmgov.httpx` and
`llmgov.httpx2` bind them to their module. See `llmgov.httpx` for what they do."""


from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Callable, Dict, Iterator, Optional, Sequence, Union

from . import _wire
from ._llmgov import Governor, InvalidRequest, Permit, PermitExpired, RedisGovernor, RedisPermit, RetryPolicy, Route

#: `paths` for the transport: fixed paths (a path, a list, a Route), or a
#: function of the request and its parsed JSON body returning them.
Paths = Union[str, Sequence[str], Route, Callable[[Any, Optional[Dict[str, Any]]], Any]]

#: A permit of either governor: both report, settle and cancel alike.
_AnyPermit = Union[Permit, RedisPermit]

_RETRIED = frozenset({408, 409, 429}) | frozenset(range(500, 600))


class _Governed:
    """What both transports share: estimating, admitting, settling, advice."""

    #: The HTTP module (`httpx` or `httpx2`) the concrete transport serves.
    _http: Any

    def __init__(
        self,
        governor: Union[Governor, RedisGovernor],
        *,
        paths: Paths,
        klass: Optional[str] = None,
        include_usage: bool = False,
        default_max_tokens: int = _wire.DEFAULT_MAX_TOKENS,
        retry: Optional[RetryPolicy] = None,
        counting: str = "exact",
        deadline_ms: Optional[float] = None,
        priority: Optional[int] = None,
    ) -> None:
        if counting not in ("exact", "fast"):
            raise _invalid("counting", counting, 'must be "exact" or "fast"')
        if isinstance(governor, RedisGovernor):
            # Refused here, once, rather than by every request: shared
            # scopes have no traffic classes, and their waiters no order.
            for field, value in (("klass", klass), ("priority", priority)):
                if value is not None:
                    raise _invalid(field, value, "is not taken by a RedisGovernor (shared scopes have no classes nor queue)")
        self.governor = governor
        self.fast = counting == "fast"
        self.deadline_ms = deadline_ms
        self.priority = priority
        self.paths = paths
        self.klass = klass
        self.include_usage = include_usage
        self.default_max_tokens = default_max_tokens
        self.retry = retry if retry is not None else RetryPolicy()

    def _prepare(self, request: Any) -> "tuple[Any, _wire.Estimate, Any]":
        raw = request.content
        body = _wire.parse_json(raw) if raw else None
        estimate = _wire.estimate(request.url.path, body, raw, self.default_max_tokens, self.fast)
        paths = self.paths(request, body) if callable(self.paths) else self.paths
        if estimate.stream:
            request = self._for_streaming(request, body, estimate)
        return request, estimate, paths

    def _for_streaming(self, request: Any, body: Optional[Dict[str, Any]], estimate: _wire.Estimate) -> Any:
        """A streamed request, with usage asked for when configured, and no
        compression so the usage events can be read as they pass."""
        headers = self._http.Headers(request.headers)
        headers["accept-encoding"] = "identity"
        content = request.content
        if self.include_usage and body is not None and estimate.shape == "openai":
            options = dict(body.get("stream_options") or {})
            if not options.get("include_usage"):
                options["include_usage"] = True
                content = _json_bytes(dict(body, stream_options=options))
                del headers["content-length"]
        return self._http.Request(request.method, request.url, headers=headers, content=content, extensions=request.extensions)

    def _request(self, estimate: _wire.Estimate) -> Dict[str, Any]:
        """The keyword arguments of the governor's acquire for a request."""
        return {
            "input_tokens": estimate.input_tokens,
            "max_output_tokens": estimate.max_output_tokens,
            "klass": self.klass,
            "priority": self.priority,
            "deadline_ms": self.deadline_ms,
        }

    def _refused(self, permit: _AnyPermit, answer: Any, body: bytes, attempt: int) -> Optional[float]:
        """A 408, 409, 429 or 5xx: reports it (a 429 holds the provider
        scope's bucket empty until its retry-after), refunds the permit (the
        provider did not serve it), and returns the seconds to wait before
        retrying, or None to give up and hand the answer to the caller."""
        permit.report(answer.status_code, answer.headers, body)
        _cancel(permit)
        advice = self.retry.advise(answer.status_code, answer.headers, body, attempt=attempt)
        return advice["delay_ms"] / 1000 if advice["advice"] == "retry_after" else None

    def _failed(self, permit: _AnyPermit, error: Exception, estimate: _wire.Estimate) -> None:
        """Finishes the permit of a request the transport failed to deliver or
        to get answered. One that never left (no connection, no pooled
        connection in time, a proxy or a protocol it cannot speak) is refunded.
        One that may have reached the provider (a read or write timeout, a
        reset connection) keeps its input charged, with no output, as the Node
        fetch does: a provider that received it counts it, and a refund would
        let the retry into a 429."""
        if isinstance(error, self._unsent_errors()):
            _cancel(permit)
        else:
            _settle_reported(permit, {"input_tokens": estimate.input_tokens, "output_tokens": 0})

    def _unsent_errors(self) -> "tuple[type, ...]":
        http = self._http
        return (http.ConnectError, http.ConnectTimeout, http.PoolTimeout, http.ProxyError, http.UnsupportedProtocol, http.LocalProtocolError)

    def _connection_advice(self, attempt: int) -> Optional[float]:
        advice = self.retry.advise_connection_error(attempt=attempt)
        return advice["delay_ms"] / 1000 if advice["advice"] == "retry_after" else None

    @staticmethod
    def _finish(permit: _AnyPermit, response: Any, content: bytes) -> None:
        """Reports the answer, then settles from its usage (as estimated when
        it has none, or none the governor accepts), or cancels it if the
        provider did not serve the request: a refusal, or a redirect (3xx,
        when the client does not follow it), as the Node fetch does."""
        permit.report(response.status_code, response.headers, content if response.status_code >= 400 else b"")
        if response.status_code >= 300:
            _cancel(permit)
            return
        body = _wire.parse_json(content)
        usage = body.get("usage") if body else None
        _settle_reported(permit, {"usage": usage} if isinstance(usage, dict) else {})

    @classmethod
    def _unread(cls, permit: _AnyPermit, response: Any) -> None:
        """The answer's body could not be read (the connection broke, or the
        read was cancelled): the permit is finished from the status alone
        before the error goes on, never left pending. A success settles as
        estimated (the provider did the work, and may bill it); a refusal is
        reported without its body and refunded."""
        cls._finish(permit, response, b"")


def _settle_reported(permit: _AnyPermit, reported: Dict[str, Any], **otherwise: Any) -> None:
    """Settles with the usage the provider reported. A report the governor
    refuses (no counts, a negative, non-integer or absurd one) must not fail
    a call that succeeded, nor leave its permit pending: the permit is then
    settled with `otherwise` (as estimated when empty). A refused settle
    changes nothing, so the second one finds the permit still pending. A
    permit that outlived its TTL during a long call was charged as estimated,
    which stands."""
    try:
        try:
            permit.settle(**reported)
        except InvalidRequest:
            permit.settle(**otherwise)
    except PermitExpired:
        pass


def _cancel(permit: _AnyPermit) -> None:
    """Refunds a permit the provider did not serve; one that outlived its TTL
    meanwhile was charged as estimated, which stands."""
    try:
        permit.cancel()
    except PermitExpired:
        pass


def _unanswered(permit: _AnyPermit) -> None:
    """The wrapped transport raised something other than a transport error
    before any answer came: the caller's task cancelled while the request was
    in flight (`asyncio.wait_for` around an SDK call), KeyboardInterrupt, a
    bug in a custom transport. Whether the request reached the provider
    cannot be told, and a provider that received it counts it against its
    limits (and may bill it), so the permit is settled as estimated rather
    than refunded: a refund of a request the provider counted would let the
    next one into a 429. It is never left pending, holding its concurrency
    slot until its TTL."""
    _settle_reported(permit, {})


def _invalid(field: str, value: Any, reason: str) -> InvalidRequest:
    """An `InvalidRequest` with the attributes the compiled module's carry
    (`field`, `value` as Python writes it, `reason`)."""
    shown = repr(value)
    error = InvalidRequest(f"invalid request: `{field}` = `{shown}`: {reason}")
    error.field, error.value, error.reason = field, shown, reason
    return error


def _json_bytes(value: Dict[str, Any]) -> bytes:
    import json

    return json.dumps(value, separators=(",", ":")).encode()


def _rebuilt(http: Any, response: Any, raw: bytes, request: Any) -> Any:
    """The same answer over bytes already read, so it can be read again."""
    return http.Response(
        response.status_code,
        headers=response.headers,
        stream=http.ByteStream(raw),
        request=request,
        extensions=response.extensions,
    )


class _SettlingStream:
    """Passes a streamed answer through, reading its usage, and settles the
    permit when the stream ends or is closed."""

    def __init__(self, inner: Any, permit: _AnyPermit, tracker: _wire.StreamUsage) -> None:
        self.inner, self.permit, self.tracker = inner, permit, tracker

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.inner:
            self.tracker.feed(chunk)
            yield chunk

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            if self.permit.state == "pending":
                _settle_stream(self.permit, self.tracker)


class _AsyncSettlingStream:
    """The async twin of `_SettlingStream`."""

    def __init__(self, inner: Any, permit: _AnyPermit, tracker: _wire.StreamUsage) -> None:
        self.inner, self.permit, self.tracker = inner, permit, tracker

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.tracker.feed(chunk)
            yield chunk

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            if self.permit.state == "pending":
                _settle_stream(self.permit, self.tracker)


def _settle_stream(permit: _AnyPermit, tracker: _wire.StreamUsage) -> None:
    """Settles a stream from its usage events, or from the output it carried
    if the governor refuses what they reported."""
    _settle_reported(permit, tracker.settle_args(), output_tokens=tracker.output_tokens_seen())


def _stream_types(http: Any) -> "tuple[type, type]":
    """The settling streams as subclasses of `http`'s stream types, which
    httpx checks with isinstance."""
    sync = type("SettlingStream", (_SettlingStream, http.SyncByteStream), {})
    asynchronous = type("AsyncSettlingStream", (_AsyncSettlingStream, http.AsyncByteStream), {})
    return sync, asynchronous


class SyncGoverned(_Governed):
    """The sync transport's logic; `llmgov.httpx.GovernedTransport` binds it
    to httpx."""

    _stream: type

    def __init__(self, governor: Union[Governor, RedisGovernor], *, paths: Paths, transport: Any = None, **options: Any) -> None:
        _Governed.__init__(self, governor, paths=paths, **options)
        self.transport = transport if transport is not None else self._http.HTTPTransport()

    def handle_request(self, request: Any) -> Any:
        request, estimate, paths = self._prepare(request)
        self.retry.record_request()
        attempt = 0
        while True:
            permit = self.governor.acquire_blocking(paths, **self._request(estimate))
            try:
                response = self.transport.handle_request(request)
            except self._http.TransportError as error:
                self._failed(permit, error, estimate)
                delay = self._connection_advice(attempt)
                if delay is None:
                    raise
                time.sleep(delay)
                attempt += 1
                continue
            except BaseException:
                _unanswered(permit)
                raise
            if estimate.stream and response.status_code < 300:
                permit.report(response.status_code, response.headers, b"")
                response.stream = self._stream(response.stream, permit, _wire.StreamUsage(estimate.model))
                return response
            try:
                answer, body = self._read(response, request)
            except BaseException:
                self._unread(permit, response)
                raise
            if response.status_code not in _RETRIED:
                self._finish(permit, answer, body)
                return answer
            delay = self._refused(permit, answer, body, attempt)
            if delay is None:
                return answer
            time.sleep(delay)
            attempt += 1

    def _read(self, response: Any, request: Any) -> "tuple[Any, bytes]":
        """The answer, read, and its decoded body (some transports, such as
        `MockTransport`, hand over answers already read)."""
        try:
            return response, response.content
        except self._http.ResponseNotRead:
            pass
        raw = b"".join(response.iter_raw())
        response.close()
        answer = _rebuilt(self._http, response, raw, request)
        return answer, answer.read()

    def close(self) -> None:
        self.transport.close()


class AsyncGoverned(_Governed):
    """The async transport's logic; `llmgov.httpx.AsyncGovernedTransport`
    binds it to httpx."""

    _stream: type

    def __init__(self, governor: Union[Governor, RedisGovernor], *, paths: Paths, transport: Any = None, **options: Any) -> None:
        _Governed.__init__(self, governor, paths=paths, **options)
        self.transport = transport if transport is not None else self._http.AsyncHTTPTransport()

    async def handle_async_request(self, request: Any) -> Any:
        request, estimate, paths = self._prepare(request)
        self.retry.record_request()
        attempt = 0
        while True:
            permit = await self.governor.acquire(paths, **self._request(estimate))
            try:
                response = await self.transport.handle_async_request(request)
            except self._http.TransportError as error:
                self._failed(permit, error, estimate)
                delay = self._connection_advice(attempt)
                if delay is None:
                    raise
                await asyncio.sleep(delay)
                attempt += 1
                continue
            except BaseException:
                _unanswered(permit)
                raise
            if estimate.stream and response.status_code < 300:
                permit.report(response.status_code, response.headers, b"")
                response.stream = self._stream(response.stream, permit, _wire.StreamUsage(estimate.model))
                return response
            try:
                answer, body = await self._read(response, request)
            except BaseException:
                self._unread(permit, response)
                raise
            if response.status_code not in _RETRIED:
                self._finish(permit, answer, body)
                return answer
            delay = self._refused(permit, answer, body, attempt)
            if delay is None:
                return answer
            await asyncio.sleep(delay)
            attempt += 1

    async def _read(self, response: Any, request: Any) -> "tuple[Any, bytes]":
        """The answer, read, and its decoded body (some transports, such as
        `MockTransport`, hand over answers already read)."""
        try:
            return response, response.content
        except self._http.ResponseNotRead:
            pass
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
        await response.aclose()
        answer = _rebuilt(self._http, response, raw, request)
        return answer, await answer.aread()

    async def aclose(self) -> None:
        await self.transport.aclose()
