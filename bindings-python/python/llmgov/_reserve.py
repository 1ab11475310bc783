"""The `async with gov.reserve(...)` entry: awaits the acquire and records
the permit in the reservation, so that leaving the block settles or
cancels it."""

from typing import Any


async def enter(reservation: Any) -> Any:
    """Marks the reservation entering, awaits the permit, records it, and
    returns it. A wait that fails (a refusal, the task cancelled) leaves the
    reservation free to enter again; so does a coroutine never awaited,
    since it marks nothing until it runs."""
    waiting = reservation._begin()
    try:
        permit = await waiting
    except BaseException:
        reservation._entered(None)
        raise
    reservation._entered(permit)
    return permit
