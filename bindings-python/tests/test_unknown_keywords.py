"""An unknown keyword is `InvalidRequest` naming it and its value, as the
README's Errors section promises, in every function: never a bare TypeError."""

from __future__ import annotations

import socket
from typing import Any, Callable

import httpx
import pytest

import llmgov
from llmgov.redis import RedisGovernor

CONFIG = {
    "scopes": {"p": {"provider": True, "limits": [{"dimension": "tokens", "amount": 100000, "window": "1h"}]}},
    "profiles": {"fast": {"deployments": ["p"]}},
}
TOML = '[scopes."p"]\nlimits = [{ dimension = "tokens", amount = 100000, window = "1h" }]\n'


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{s.getsockname()[1]}"


def redis_toml() -> str:
    return TOML + f'[redis]\nurl = "{closed_port_url()}"\nprefix = "py-kw"\nexpected_processes = 2\n'


def gov() -> llmgov.Governor:
    return llmgov.Governor.from_dict(CONFIG, clock="manual")


def permit() -> Any:
    return gov().try_acquire("p", input_tokens=10, max_output_tokens=10)


CALLS: list[Any] = [
    pytest.param(lambda: permit().settle(1, 1, bogus=3), id="Permit.settle"),  # type: ignore[call-arg]
    pytest.param(lambda: permit().add_output(1, bogus=3), id="Permit.add_output"),  # type: ignore[call-arg]
    pytest.param(lambda: permit().report(200, bogus=3), id="Permit.report"),  # type: ignore[call-arg]
    pytest.param(lambda: llmgov.count_tokens("hi", bogus=3), id="count_tokens"),  # type: ignore[call-arg]
    pytest.param(lambda: llmgov.count_chat_tokens([], bogus=3), id="count_chat_tokens"),  # type: ignore[call-arg]
    pytest.param(lambda: llmgov.estimate_tokens("hi", bogus=3), id="estimate_tokens"),  # type: ignore[call-arg]
    pytest.param(lambda: llmgov.classify_response(429, bogus=3), id="classify_response"),  # type: ignore[call-arg]
    pytest.param(lambda: llmgov.RetryPolicy(bogus=3), id="RetryPolicy"),  # type: ignore[call-arg]
    pytest.param(lambda: llmgov.RetryPolicy().advise(429, attempt=1, bogus=3), id="RetryPolicy.advise"),  # type: ignore[call-arg]
    pytest.param(lambda: llmgov.RetryPolicy().advise_connection_error(attempt=1, bogus=3), id="RetryPolicy.advise_connection_error"),  # type: ignore[call-arg]
    pytest.param(lambda: gov().route("p", bogus=3), id="Governor.route"),  # type: ignore[call-arg]
    pytest.param(lambda: gov().profile("fast", bogus=3), id="Governor.profile"),  # type: ignore[call-arg]
    pytest.param(lambda: gov().advance(1, bogus=3), id="Governor.advance"),  # type: ignore[call-arg]
    pytest.param(lambda: gov().set_event_hook(None, bogus=3), id="Governor.set_event_hook"),  # type: ignore[call-arg]
    pytest.param(lambda: llmgov.Governor.from_toml(TOML, bogus=3), id="Governor.from_toml"),  # type: ignore[call-arg]
    pytest.param(lambda: llmgov.Governor.from_json("{}", bogus=3), id="Governor.from_json"),  # type: ignore[call-arg]
    pytest.param(lambda: llmgov.Governor.from_dict(CONFIG, bogus=3), id="Governor.from_dict"),  # type: ignore[call-arg]
    pytest.param(lambda: llmgov.Governor.from_preset("openai-tier-1", bogus=3), id="Governor.from_preset"),  # type: ignore[call-arg]
    pytest.param(lambda: RedisGovernor.from_toml(redis_toml(), bogus=3), id="RedisGovernor.from_toml"),  # type: ignore[call-arg]
    pytest.param(lambda: RedisGovernor.from_toml(redis_toml()).route("p", bogus=3), id="RedisGovernor.route"),  # type: ignore[call-arg]
    pytest.param(
        lambda: RedisGovernor.from_toml(redis_toml()).try_acquire("p", input_tokens=1).settle(1, 1, bogus=3),  # type: ignore[call-arg]
        id="RedisPermit.settle",
    ),
]


@pytest.mark.parametrize("call", CALLS)
def test_an_unknown_keyword_is_invalid_request_naming_it(call: Callable[[], Any]) -> None:
    with pytest.raises(llmgov.InvalidRequest) as error:
        call()
    assert error.value.field == "bogus"
    assert "bogus" in str(error.value) and "3" in str(error.value)


def test_report_takes_status_by_keyword_as_the_readme_shows_it() -> None:
    by_keyword = permit().report(status=429, headers={"retry-after": "2"}, body=b"")
    assert by_keyword == permit().report(429, {"retry-after": "2"}, b"")
    assert by_keyword["limited"] is True
    response = httpx.Response(429, headers={"retry-after": "2"})
    assert permit().report(status=response)["limited"] is True
    assert permit().report(status_or_response=429)["limited"] is True
    with pytest.raises(llmgov.InvalidRequest) as both:
        permit().report(status=429, status_or_response=429)
    assert both.value.field == "status"
