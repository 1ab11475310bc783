"""Stubs of the compiled module `llmgov._llmgov` (checked by mypy.stubtest)."""

import os
from types import TracebackType
from typing import Any, Awaitable, Callable, Dict, List, Literal, Mapping, Optional, Sequence, Tuple, TypedDict, Union, final


__all__ = [
    "AlreadyReconciled",
    "CircuitOpen",
    "ConfigError",
    "DeadlineExceeded",
    "Error",
    "Governor",
    "InvalidPath",
    "InvalidRequest",
    "NeverFits",
    "Permit",
    "PermitExpired",
    "PermitFinished",
    "Profile",
    "QueueFull",
    "RateLimited",
    "Ready",
    "RedisGovernor",
    "RedisPermit",
    "RedisRoute",
    "Reservation",
    "RetryPolicy",
    "Route",
    "UnknownPreset",
    "UnknownScope",
    "_Acquiring",
    "_Driver",
    "_Forget",
    "_RedisAttempt",
    "_estimate_request",
    "__version__",
    "classify_response",
    "count_chat_tokens",
    "count_tokens",
    "estimate_tokens",
    "plan_capacity",
]

__version__: str

_Paths = Union[str, Sequence[str], "Route"]
_Headers = Union[Mapping[str, str], Mapping[bytes, bytes], Sequence[Tuple[Union[str, bytes], Union[str, bytes]]], Any]
_Body = Union[bytes, bytearray, str, None]
_Clock = Literal["monotonic", "manual"]

class _RefusalCount(TypedDict):
    """Refusals naming one dimension, by one party."""

    dimension: str
    gateway_decision: Literal["rejected_locally", "admitted_then_provider_rejected"]
    count: int

class _EstimateError(TypedDict):
    """Quantiles of actual / estimated - 1 for one provider route and side."""

    scopes: List[str]
    side: Literal["input", "output"]
    samples: int
    p05: float
    p50: float
    p95: float

class _Metrics(TypedDict):
    """Everything a governor exposes at one moment (`Governor.metrics()`)."""

    snapshot: Dict[str, Any]
    queues: Dict[str, Any]
    refusals: List[_RefusalCount]
    estimate_errors: List[_EstimateError]
    retry_amplification: float

class Error(Exception):
    """Base of every llmgov error; `code` is the stable error code."""

    code: str

class RateLimited(Error):
    """The request fits in principle but not now; nothing was reserved."""

    scope: str
    dimension: str
    retry_after: Optional[float]
    retry_after_ms: Optional[int]
    gateway_decision: str

class NeverFits(Error):
    """The request costs more than a limit can ever hold: waiting never helps."""

    scope: str
    dimension: str
    cost: int
    burst: int
    gateway_decision: str

class ConfigError(Error):
    """A configuration field is wrong; nothing was built."""

    field: str
    value: str
    reason: str

class InvalidPath(Error):
    """A scope path is malformed."""

    path: str
    reason: str

class UnknownScope(Error):
    """No configured scope or template covers the path."""

    path: str

class UnknownPreset(Error):
    """No preset has this name."""

    name: str
    known: List[str]

class InvalidRequest(Error):
    """A request argument is of the wrong type or out of range."""

    field: str
    value: str
    reason: str

class PermitFinished(Error):
    """The permit was already settled or cancelled."""

    state: str

class PermitExpired(Error):
    """The permit outlived its TTL and was charged as estimated."""

@final
class DeadlineExceeded(Error):
    """A waiting request was not admitted within its deadline."""

    waited_ms: int
    retry_after: Optional[float]
    retry_after_ms: Optional[int]

class CircuitOpen(Error):
    """A provider scope's circuit breaker is open after consecutive failures."""

    scope: str
    retry_after: float
    retry_after_ms: int

class QueueFull(Error):
    """The request's traffic class has as many waiters as its queue allows."""

    klass: str
    bound: int
    retry_after: Optional[float]
    retry_after_ms: Optional[int]

class AlreadyReconciled(Error):
    """A RedisGovernor permit was already settled or cancelled."""

@final
class Route:
    """A route: the scopes a request is charged on, resolved once."""

    @property
    def index(self) -> int: ...
    @property
    def paths(self) -> List[str]: ...

@final
class Profile:
    """A model profile and its fallback chain, resolved for a consumer's paths."""

    @property
    def name(self) -> str: ...
    @property
    def paths(self) -> List[str]: ...

@final
class Permit:
    """A granted reservation, reconciled once."""

    def settle(
        self,
        input_tokens: Optional[Union[int, Any]] = None,
        output_tokens: Optional[int] = None,
        *,
        cached_input_tokens: Optional[int] = None,
        usage: Any = None,
    ) -> None: ...
    def cancel(self) -> None: ...
    def add_output(self, tokens: int) -> None: ...
    def report(self, status: Any, headers: _Headers = None, body: _Body = None) -> Dict[str, Any]: ...
    @property
    def state(self) -> Literal["pending", "settled", "cancelled", "expired"]: ...
    @property
    def charged(self) -> Dict[str, int]: ...
    @property
    def profile(self) -> Optional[str]: ...
    @property
    def deployment(self) -> Optional[str]: ...
    @property
    def fell_back(self) -> bool: ...
    @property
    def degraded(self) -> bool: ...
    @property
    def expires_at_ms(self) -> float: ...
    def __enter__(self) -> "Permit": ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
    def __aenter__(self) -> "Ready": ...
    def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> "Ready": ...

@final
class Ready:
    """An awaitable that is already done."""

    def __await__(self) -> "Ready": ...
    def __iter__(self) -> "Ready": ...
    def __next__(self) -> Any: ...

@final
class Governor:
    """A rate-limit governor: reserve before a request leaves, reconcile after."""

    @staticmethod
    def from_toml(source: Union[str, os.PathLike[str]], clock: _Clock = "monotonic") -> "Governor": ...
    @staticmethod
    def from_json(text: str, clock: _Clock = "monotonic") -> "Governor": ...
    @staticmethod
    def from_dict(config: Mapping[str, Any], clock: _Clock = "monotonic") -> "Governor": ...
    @staticmethod
    def from_preset(name: str, clock: _Clock = "monotonic") -> "Governor": ...
    def advance(self, ms: float) -> None: ...
    @property
    def now_ms(self) -> float: ...
    def route(self, paths: _Paths) -> Route: ...
    def try_acquire(
        self,
        paths: _Paths,
        input_tokens: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
        *,
        text: Optional[str] = None,
        messages: Optional[Sequence[Mapping[str, Any]]] = None,
        model: Optional[str] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        cached_input_tokens: Optional[int] = None,
        expected_output_tokens: Optional[int] = None,
        klass: Optional[str] = None,
        **extra: Any,
    ) -> Permit: ...
    def acquire(
        self,
        paths: _Paths,
        input_tokens: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
        *,
        text: Optional[str] = None,
        messages: Optional[Sequence[Mapping[str, Any]]] = None,
        model: Optional[str] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        cached_input_tokens: Optional[int] = None,
        expected_output_tokens: Optional[int] = None,
        klass: Optional[str] = None,
        priority: Optional[int] = None,
        deadline_ms: Optional[float] = None,
        **extra: Any,
    ) -> Awaitable[Permit]: ...
    def acquire_blocking(
        self,
        paths: _Paths,
        input_tokens: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
        *,
        text: Optional[str] = None,
        messages: Optional[Sequence[Mapping[str, Any]]] = None,
        model: Optional[str] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        cached_input_tokens: Optional[int] = None,
        expected_output_tokens: Optional[int] = None,
        klass: Optional[str] = None,
        priority: Optional[int] = None,
        deadline_ms: Optional[float] = None,
        timeout: Optional[float] = None,
        **extra: Any,
    ) -> Permit: ...
    def reserve(
        self,
        paths: _Paths,
        input_tokens: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
        *,
        text: Optional[str] = None,
        messages: Optional[Sequence[Mapping[str, Any]]] = None,
        model: Optional[str] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        cached_input_tokens: Optional[int] = None,
        expected_output_tokens: Optional[int] = None,
        klass: Optional[str] = None,
        priority: Optional[int] = None,
        deadline_ms: Optional[float] = None,
        timeout: Optional[float] = None,
        **extra: Any,
    ) -> "Reservation": ...
    def profile(self, name: Union[str, "Profile"], paths: Optional[Union[str, Sequence[str]]] = None) -> "Profile": ...
    def try_acquire_profile(
        self,
        profile: Union[str, "Profile"],
        input_tokens: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
        *,
        paths: Optional[Union[str, Sequence[str]]] = None,
        text: Optional[str] = None,
        messages: Optional[Sequence[Mapping[str, Any]]] = None,
        model: Optional[str] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        cached_input_tokens: Optional[int] = None,
        expected_output_tokens: Optional[int] = None,
        klass: Optional[str] = None,
        **extra: Any,
    ) -> Permit: ...
    def acquire_profile(
        self,
        profile: Union[str, "Profile"],
        input_tokens: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
        *,
        paths: Optional[Union[str, Sequence[str]]] = None,
        text: Optional[str] = None,
        messages: Optional[Sequence[Mapping[str, Any]]] = None,
        model: Optional[str] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        cached_input_tokens: Optional[int] = None,
        expected_output_tokens: Optional[int] = None,
        klass: Optional[str] = None,
        priority: Optional[int] = None,
        deadline_ms: Optional[float] = None,
        **extra: Any,
    ) -> Awaitable[Permit]: ...
    def acquire_profile_blocking(
        self,
        profile: Union[str, "Profile"],
        input_tokens: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
        *,
        paths: Optional[Union[str, Sequence[str]]] = None,
        text: Optional[str] = None,
        messages: Optional[Sequence[Mapping[str, Any]]] = None,
        model: Optional[str] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        cached_input_tokens: Optional[int] = None,
        expected_output_tokens: Optional[int] = None,
        klass: Optional[str] = None,
        priority: Optional[int] = None,
        deadline_ms: Optional[float] = None,
        timeout: Optional[float] = None,
        **extra: Any,
    ) -> Permit: ...
    def set_event_hook(self, hook: Optional[Callable[[Dict[str, Any]], Any]]) -> None: ...
    def prometheus(self) -> str: ...
    def metrics(self) -> _Metrics: ...
    def queue_metrics(self) -> Dict[str, Any]: ...
    def snapshot(self) -> Dict[str, Any]: ...

@final
class _Driver:
    """One event loop's waiting acquires (llmgov._wake)."""

    def __new__(cls) -> "_Driver": ...
    def fileno(self) -> int: ...
    def drain(self) -> None: ...

@final
class _RedisAttempt:
    """One waiting acquire of a RedisGovernor (llmgov._redis_wait)."""

    def step(self) -> Union["RedisPermit", float]: ...

@final
class _Acquiring:
    """What `acquire` and `acquire_profile` return: awaits the driver's
    future; a caller that stops waiting gives back what it was granted."""

    def __await__(self) -> "_Acquiring": ...
    def __next__(self) -> Any: ...
    def send(self, _value: Any) -> Any: ...
    def throw(self, *thrown: Any) -> Any: ...
    def close(self) -> None: ...

@final
class _Forget:
    """Drops a waiting acquire when its asyncio future is done."""

    def __call__(self, _future: Any) -> None: ...

@final
class Reservation:
    """A context manager: waits for a permit on entry, cancels it on an
    exception, settles it as estimated if left pending."""

    def __enter__(self) -> Permit: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
    def __aenter__(self) -> Awaitable[Permit]: ...
    def _begin(self) -> Awaitable[Permit]: ...
    def _entered(self, permit: Optional[Permit]) -> None: ...
    def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Awaitable[bool]: ...

@final
class RetryPolicy:
    """Whether and when to retry a failed attempt."""

    def __new__(
        cls,
        *,
        max_retries: Optional[int] = None,
        base_delay_ms: Optional[float] = None,
        max_delay_ms: Optional[float] = None,
        budget_ratio: Optional[float] = None,
        budget_min_retries: Optional[int] = None,
        budget_window_ms: Optional[float] = None,
    ) -> "RetryPolicy": ...
    def record_request(self) -> None: ...
    def advise(
        self,
        status: int,
        headers: _Headers = None,
        body: _Body = None,
        *,
        attempt: int,
        deadline_ms: Optional[float] = None,
        provider: str = "auto",
    ) -> Dict[str, Any]: ...
    def advise_connection_error(self, *, attempt: int, deadline_ms: Optional[float] = None) -> Dict[str, Any]: ...
    def budget_available(self) -> int: ...

def classify_response(status: int, headers: _Headers = None, body: _Body = None, provider: str = "auto") -> Dict[str, Any]: ...
def count_tokens(text: str, model: Optional[str] = None) -> int: ...
def count_chat_tokens(
    messages: Sequence[Mapping[str, Any]],
    model: Optional[str] = None,
    tools: Optional[Sequence[Mapping[str, Any]]] = None,
    *,
    fast: bool = False,
) -> int: ...
def estimate_tokens(text: str) -> int: ...
def _estimate_request(body: str, api: str, fast: bool) -> Tuple[int, Optional[int], Optional[str]]: ...
def plan_capacity(
    *,
    avg_input: float,
    avg_output: float,
    rpm: Optional[float] = None,
    tpm: Optional[float] = None,
    input_tpm: Optional[float] = None,
    output_tpm: Optional[float] = None,
    concurrency: Optional[float] = None,
    p95_input: Optional[float] = None,
    p95_output: Optional[float] = None,
    latency: Optional[float] = None,
    utilisation: Optional[float] = None,
) -> Dict[str, Any]: ...

@final
class RedisRoute:
    """A request's scopes split into local and shared parts, resolved once."""

    @property
    def paths(self) -> List[str]: ...

@final
class RedisPermit:
    """A granted reservation of a RedisGovernor, reconciled once."""

    def settle(
        self,
        input_tokens: Optional[Union[int, Any]] = None,
        output_tokens: Optional[int] = None,
        *,
        cached_input_tokens: Optional[int] = None,
        usage: Any = None,
    ) -> None: ...
    def cancel(self) -> None: ...
    def add_output(self, tokens: int) -> None: ...
    def report(self, status: Any, headers: _Headers = None, body: _Body = None) -> Dict[str, Any]: ...
    @property
    def state(self) -> Literal["pending", "settled", "cancelled"]: ...
    @property
    def charged(self) -> Dict[str, int]: ...
    @property
    def from_fallback(self) -> bool: ...
    def __enter__(self) -> "RedisPermit": ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

@final
class RedisGovernor:
    """A governor whose [redis.scopes] are enforced across processes through Redis."""

    @staticmethod
    def from_toml(source: Union[str, os.PathLike[str]], clock: _Clock = "monotonic") -> "RedisGovernor": ...
    @staticmethod
    def from_dict(config: Mapping[str, Any], clock: _Clock = "monotonic") -> "RedisGovernor": ...
    def advance(self, ms: float) -> None: ...
    @property
    def now_ms(self) -> float: ...
    def route(self, paths: Union[str, Sequence[str], RedisRoute]) -> RedisRoute: ...
    def try_acquire(
        self,
        paths: Union[str, Sequence[str], RedisRoute],
        input_tokens: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
        *,
        text: Optional[str] = None,
        messages: Optional[Sequence[Mapping[str, Any]]] = None,
        model: Optional[str] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        cached_input_tokens: Optional[int] = None,
        **extra: Any,
    ) -> RedisPermit: ...
    def acquire(
        self,
        paths: Union[str, Sequence[str], RedisRoute],
        input_tokens: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
        *,
        text: Optional[str] = None,
        messages: Optional[Sequence[Mapping[str, Any]]] = None,
        model: Optional[str] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        cached_input_tokens: Optional[int] = None,
        deadline_ms: Optional[float] = None,
        **extra: Any,
    ) -> Awaitable[RedisPermit]: ...
    def acquire_blocking(
        self,
        paths: Union[str, Sequence[str], RedisRoute],
        input_tokens: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
        *,
        text: Optional[str] = None,
        messages: Optional[Sequence[Mapping[str, Any]]] = None,
        model: Optional[str] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        cached_input_tokens: Optional[int] = None,
        deadline_ms: Optional[float] = None,
        timeout: Optional[float] = None,
        **extra: Any,
    ) -> RedisPermit: ...
    def health(self) -> Dict[str, Any]: ...
    def heartbeat(self) -> None: ...
    def return_leases(self) -> None: ...
    def snapshot(self) -> Dict[str, Any]: ...
    def metrics(self) -> _Metrics: ...
