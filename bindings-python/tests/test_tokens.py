"""Token counting from Python reads messages by the core's rules, as every
other binding and the HTTP transports do: the same messages count the same
wherever they are counted."""

import collections
import json
import types
from typing import Any, Dict, List

import pytest

import llmgov
from llmgov import _llmgov

ARGUMENTS = "word " * 400


def as_sent(messages: List[Dict[str, Any]], api: str = "openai", **body: Any) -> int:
    """The input the transports reserve for a body holding `messages`."""
    return _llmgov._estimate_request(json.dumps({"model": "gpt-4o", "messages": messages, **body}), api, False)[0]


def test_tool_calls_count_their_name_and_arguments() -> None:
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": ARGUMENTS}}]}
    messages = [{"role": "user", "content": "weather?"}, call]
    counted = llmgov.count_chat_tokens(messages, model="gpt-4o")
    assert counted >= llmgov.count_chat_tokens(messages[:1], model="gpt-4o") + 400
    assert counted == as_sent(messages)


def test_anthropic_tool_results_and_tool_schemas_count() -> None:
    result = {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": ARGUMENTS}]}
    messages = [{"role": "user", "content": [result]}]
    assert llmgov.count_chat_tokens(messages, model="claude-sonnet-4") >= 400
    tools = [{"name": "weather", "description": "the weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    with_tools = llmgov.count_chat_tokens(messages, model="claude-sonnet-4", tools=tools)
    assert with_tools > llmgov.count_chat_tokens(messages, model="claude-sonnet-4")
    assert with_tools == as_sent(messages, "anthropic", model="claude-sonnet-4", tools=tools)


def test_a_request_s_messages_reserve_what_count_chat_tokens_says() -> None:
    gov = llmgov.Governor.from_dict({"scopes": {"a": {"limits": [{"dimension": "tokens", "amount": 100_000, "window": "1m"}]}}}, clock="manual")
    messages = [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": ARGUMENTS}}]}]
    permit = gov.try_acquire("a", messages=messages, model="gpt-4o")
    assert permit.charged["input_tokens"] == llmgov.count_chat_tokens(messages, model="gpt-4o") == as_sent(messages)


def test_any_mapping_and_sequence_is_taken_as_the_stubs_say() -> None:
    message = {"role": "user", "content": "Hello!"}
    assert llmgov.count_chat_tokens((types.MappingProxyType(message),), model="gpt-4o") == 9
    assert llmgov.count_chat_tokens(collections.UserList([message]), model="gpt-4o") == 9
    config = types.MappingProxyType({"scopes": {"a": {"limits": [{"dimension": "requests", "amount": 2, "window": "1m"}]}}})
    gov = llmgov.Governor.from_dict(config, clock="manual")
    assert gov.try_acquire("a").state == "pending"


@pytest.mark.parametrize(
    "messages,field,says",
    [
        ("hi", "messages", "list of message dicts"),
        (b"hi", "messages", "list of message dicts"),
        ([3], "messages[0]", "must be a dict"),
        ([{"role": "user", "content": 3}], "messages[0].content", "string, None or a list"),
        ([{"role": "user", "content": [{"type": "text", "text": b"x"}]}], "messages[0].content[0].text", "not JSON data"),
    ],
)
def test_bad_messages_name_the_field(messages: Any, field: str, says: str) -> None:
    with pytest.raises(llmgov.InvalidRequest) as bad:
        llmgov.count_chat_tokens(messages)
    assert bad.value.field == field and says in bad.value.reason, str(bad.value)


@pytest.mark.parametrize("other", [{"input_tokens": 100}, {"text": "hello"}, {}])
def test_tools_without_messages_are_refused_not_left_out(other: Dict[str, Any]) -> None:
    gov = llmgov.Governor.from_dict({"scopes": {"a": {"limits": [{"dimension": "requests", "amount": 2, "window": "1m"}]}}}, clock="manual")
    with pytest.raises(llmgov.InvalidRequest) as bad:
        gov.try_acquire("a", tools=[{"type": "function", "function": {"name": "f"}}], **other)
    assert bad.value.field == "tools" and "only with messages" in bad.value.reason
    assert gov.snapshot()["admitted"] == 0
