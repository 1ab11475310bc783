"""The asyncio side of `await RedisGovernor.acquire(...)`: each try is one
call of the attempt, which says how long to sleep before the next (see
llmgov-redis's `Wait`). Cancelled while it sleeps, it holds nothing."""

from __future__ import annotations

import asyncio
from typing import Any


async def acquire(attempt: Any) -> Any:
    """Tries until admitted (the `RedisPermit`) or refused for good."""
    while True:
        outcome = attempt.step()
        if not isinstance(outcome, float):
            return outcome
        await asyncio.sleep(outcome)
