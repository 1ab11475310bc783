"""One driver per asyncio event loop for `await gov.acquire(...)`: the loop
reads the driver's socket and resolves the acquires it woke, on its own
thread (see src/wake.rs)."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, MutableMapping

from ._llmgov import _Driver

# Keyed weakly where the loop allows it, so a discarded loop takes its driver.
_drivers: MutableMapping[Any, _Driver] = weakref.WeakKeyDictionary()
_strong: MutableMapping[Any, _Driver] = {}


def driver(loop: asyncio.AbstractEventLoop) -> _Driver:
    """The loop's driver, made and registered as a reader on first use."""
    found = _drivers.get(loop) if _weakly(loop) else _strong.get(loop)
    if found is None:
        found = _Driver()
        loop.add_reader(found.fileno(), found.drain)
        if _weakly(loop):
            _drivers[loop] = found
        else:
            _strong[loop] = found
    return found


def _weakly(loop: Any) -> bool:
    try:
        weakref.ref(loop)
        return True
    except TypeError:
        return False
