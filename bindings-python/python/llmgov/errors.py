"""The llmgov exception tree (defined in the compiled module, ``src/errors.rs``).

Every exception derives from :class:`Error` and carries ``code``, the core's
stable error code::

    Error                      code
    ├── RateLimited            rate_limited     retry_after, retry_after_ms, scope, dimension, gateway_decision
    ├── NeverFits              never_fits       scope, dimension, cost, burst, gateway_decision
    ├── ConfigError            invalid_config   field, value, reason
    ├── InvalidPath            invalid_path     path, reason
    ├── UnknownScope           unknown_scope    path
    ├── UnknownPreset          unknown_preset   name, known
    ├── InvalidRequest         invalid_request  field, value, reason
    ├── PermitFinished         permit_finished  state
    ├── PermitExpired          permit_expired
    ├── DeadlineExceeded       deadline_exceeded waited_ms, retry_after, retry_after_ms
    ├── QueueFull              queue_full       klass, bound, retry_after, retry_after_ms
    ├── CircuitOpen            circuit_open     scope, retry_after, retry_after_ms
    └── AlreadyReconciled      already_reconciled  (a RedisGovernor permit settled or cancelled twice)
"""

from ._llmgov import (
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
    "InvalidPath",
    "InvalidRequest",
    "NeverFits",
    "PermitExpired",
    "PermitFinished",
    "QueueFull",
    "RateLimited",
    "UnknownPreset",
    "UnknownScope",
]
