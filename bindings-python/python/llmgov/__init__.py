"""llmgov: a rate-limit governor for LLM APIs.

Before a request leaves, reserve every limit it is subject to on every scope
it touches, all at once or not at all; after the response, reconcile the
reservation with the provider's actual usage::

    import llmgov

    gov = llmgov.Governor.from_toml('''
        [scopes."openai/org/gpt-4o"]
        limits = [{ dimension = "tokens", amount = 30000, window = "1m" }]
    ''')
    permit = gov.try_acquire("openai/org/gpt-4o", input_tokens=1200, max_output_tokens=300)
    # ... call the provider ...
    permit.settle(input_tokens=1180, output_tokens=212)

    # Or wait, fairly, for capacity:
    async with gov.reserve("openai/org/gpt-4o", input_tokens=1200, max_output_tokens=300) as permit:
        ...  # settled as estimated at the end unless settled here; cancelled on an exception

The engine is the Rust core, compiled into ``llmgov._llmgov``.
``llmgov.httpx`` governs any httpx client (and so the OpenAI and Anthropic
SDKs) with one transport.
"""

from ._llmgov import (
    Governor,
    Permit,
    Profile,
    Reservation,
    RetryPolicy,
    Route,
    __version__,
    classify_response,
    count_chat_tokens,
    count_tokens,
    estimate_tokens,
    plan_capacity,
)
from .errors import (
    AlreadyReconciled,
    CircuitOpen,
    ConfigError,
    DeadlineExceeded,
    Error,
    InvalidPath,
    InvalidRequest,
    NeverFits,
    PermitExpired,
    PermitFinished,
    QueueFull,
    RateLimited,
    UnknownPreset,
    UnknownScope,
)

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
    "Reservation",
    "RetryPolicy",
    "Route",
    "UnknownPreset",
    "UnknownScope",
    "__version__",
    "classify_response",
    "count_chat_tokens",
    "count_tokens",
    "estimate_tokens",
    "plan_capacity",
]
