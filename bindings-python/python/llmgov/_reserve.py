"""The `async with gov.reserve(...)` entry: awaits the acquire and records
the permit in the reservation, so that leaving the block settles or
cancels it."""

from typing import Any


async def enter(reservation: Any, waiting: Any) -> Any:
    """Awaits the permit, records it in the reservation, and returns it."""
    permit = await waiting
    reservation._entered(permit)
    return permit
