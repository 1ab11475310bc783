"""A permit's life past its TTL and after it is reconciled: leaving a block
late never replaces the block's own exception, and `charged` and `state`
say what the governor did with it."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, ContextManager

import pytest

import llmgov

CONFIG = {
    "permit_ttl": "10s",
    "scopes": {
        "p": {
            "limits": [
                {"dimension": "tokens", "amount": 100000, "window": "1h"},
                {"dimension": "concurrency", "amount": 4},
            ]
        }
    },
}


@pytest.fixture
def gov() -> llmgov.Governor:
    return llmgov.Governor.from_dict(CONFIG, clock="manual")


def permit_block(gov: llmgov.Governor) -> ContextManager[Any]:
    return gov.try_acquire("p", input_tokens=100, max_output_tokens=50)  # type: ignore[return-value]


def reserve_block(gov: llmgov.Governor) -> ContextManager[Any]:
    return gov.reserve("p", input_tokens=100, max_output_tokens=50)


BLOCKS = [pytest.param(permit_block, id="permit"), pytest.param(reserve_block, id="reserve")]


class Boom(Exception):
    pass


@pytest.mark.parametrize("block", BLOCKS)
def test_leaving_a_block_after_the_ttl_raises_nothing(gov: llmgov.Governor, block: Callable[..., Any]) -> None:
    with block(gov) as permit:
        gov.advance(20000)
    # Expired: charged as estimated, and the block left quietly.
    assert permit.state == "expired"


@pytest.mark.parametrize("block", BLOCKS)
def test_the_blocks_own_exception_survives_leaving_after_the_ttl(gov: llmgov.Governor, block: Callable[..., Any]) -> None:
    with pytest.raises(Boom):
        with block(gov):
            gov.advance(20000)
            raise Boom()


@pytest.mark.parametrize("block", BLOCKS)
def test_async_blocks_after_the_ttl_keep_their_exception(gov: llmgov.Governor, block: Callable[..., Any]) -> None:
    async def late(fail: bool) -> None:
        async with block(gov):  # type: ignore[attr-defined]
            gov.advance(20000)
            if fail:
                raise Boom()

    asyncio.run(late(False))
    with pytest.raises(Boom):
        asyncio.run(late(True))


ZERO = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}


def test_charged_is_the_settled_usage_once_settled(gov: llmgov.Governor) -> None:
    permit = gov.try_acquire("p", input_tokens=100, max_output_tokens=50)
    assert permit.charged == {"input_tokens": 100, "cached_input_tokens": 0, "output_tokens": 50}
    permit.settle(80, 20)
    assert permit.charged == {"input_tokens": 80, "cached_input_tokens": 0, "output_tokens": 20}


def test_charged_is_zero_once_cancelled(gov: llmgov.Governor) -> None:
    permit = gov.try_acquire("p", input_tokens=100, max_output_tokens=50)
    permit.cancel()
    assert permit.charged == ZERO
    with gov.try_acquire("p", input_tokens=100, max_output_tokens=50) as left:
        pass
    assert left.charged["output_tokens"] == 50
    with pytest.raises(Boom):
        with gov.try_acquire("p", input_tokens=100, max_output_tokens=50) as failed:
            raise Boom()
    assert failed.charged == ZERO


def test_state_is_expired_exactly_when_settle_would_say_so(gov: llmgov.Governor) -> None:
    early = gov.try_acquire("p", input_tokens=100, max_output_tokens=50)
    late = gov.try_acquire("p", input_tokens=100, max_output_tokens=50)
    assert late.expires_at_ms == early.expires_at_ms
    gov.advance(early.expires_at_ms - gov.now_ms - 1)
    assert early.state == late.state == "pending"
    early.settle()
    gov.advance(1)
    # At its expiry, before anything reconciles it: expired, and settle agrees.
    assert late.state == "expired"
    assert late.charged == {"input_tokens": 100, "cached_input_tokens": 0, "output_tokens": 50}
    with pytest.raises(llmgov.PermitExpired):
        late.settle(1, 1)
    assert late.state == "expired"
    assert late.charged["output_tokens"] == 50
