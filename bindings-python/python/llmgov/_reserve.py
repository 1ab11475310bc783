"""The `async with gov.reserve(...)` entry, in Python so that the permit is
recorded on the event loop's thread, never from the runtime that waited."""

from typing import Any


async def enter(reservation: Any, waiting: Any) -> Any:
    """Awaits the permit, records it in the reservation, and returns it."""
    permit = await waiting
    reservation._entered(permit)
    return permit
