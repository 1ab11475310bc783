"""The real `openai` and `anthropic` SDKs against `llmgov mock-server`,
through the governed transports: 500 concurrent requests wait in the
governor's queue (the limits bind), no 429 reaches the caller, and the
governor's ledger reconciles exactly with what the server charged."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, List

import anthropic
import httpx
import httpx2
import openai
import pytest

import llmgov
from llmgov import _wire
from llmgov.httpx import AsyncGovernedTransport, GovernedTransport
from llmgov.httpx2 import AsyncGovernedTransport as AsyncGovernedTransport2

# The provider: 60 requests and 2400 tokens a second, charged as used
# (`actual`), plus a day-long sliding window of tokens whose `remaining`
# header tells what the server has charged in all.
MOCK = """
[server]
seed = 11
output_tokens = { min = 5, max = 20 }

[openai]
shape = "openai"
charging = "actual"
limits = [
  { dimension = "requests", amount = 60, window = "1s" },
  { dimension = "tokens", amount = 2400, window = "1s" },
  { dimension = "tokens", amount = 100000000, window = "1d", algorithm = "sliding_window" },
]
latency = { ttft_ms = 1, ms_per_output_token = 0.1 }

[anthropic]
shape = "anthropic"
charging = "actual"
limits = [
  { dimension = "requests", amount = 60, window = "1s" },
  { dimension = "input_tokens", amount = 1500, window = "1s" },
  { dimension = "output_tokens", amount = 1500, window = "1s" },
  { dimension = "input_tokens", amount = 100000000, window = "1d", algorithm = "sliding_window" },
  { dimension = "output_tokens", amount = 100000000, window = "1d", algorithm = "sliding_window" },
]
latency = { ttft_ms = 1, ms_per_output_token = 0.1 }
"""

# The governor: the provider's limits at 75%, and an audit scope on every
# route whose day-long sliding window holds exactly what was settled. A
# permit is held until its answer is read, so the concurrency cap bounds
# how many admitted requests an event-loop stall can hold back and then
# send in one bunch: at most 10, which the margin absorbs (the provider sees
# at most 45 + 10 requests at once, and 45 a second after that).
GOVERNOR = {
    "safety_margin": 0.75,
    "scopes": {
        "openai/org/gpt-4o": {
            "provider": True,
            "limits": [
                {"dimension": "concurrency", "amount": 10},
                {"dimension": "requests", "amount": 60, "window": "1s"},
                {"dimension": "tokens", "amount": 2400, "window": "1s"},
            ],
        },
        "anthropic/org/claude": {
            "provider": True,
            "limits": [
                {"dimension": "concurrency", "amount": 10},
                {"dimension": "requests", "amount": 60, "window": "1s"},
                {"dimension": "input_tokens", "amount": 1500, "window": "1s"},
                {"dimension": "output_tokens", "amount": 1500, "window": "1s"},
            ],
        },
        "audit/openai": {
            "safety_margin": 1.0,
            "limits": [{"dimension": "tokens", "amount": 100000000, "window": "1d", "algorithm": "sliding_window"}],
        },
        "audit/anthropic": {
            "safety_margin": 1.0,
            "limits": [
                {"dimension": "input_tokens", "amount": 100000000, "window": "1d", "algorithm": "sliding_window"},
                {"dimension": "output_tokens", "amount": 100000000, "window": "1d", "algorithm": "sliding_window"},
            ],
        },
    },
}

LOAD = 500
POOL = httpx.Limits(max_connections=50, max_keepalive_connections=50)


class Recorder(httpx.AsyncBaseTransport):
    """Sits between the governed transport and the network and counts the
    answers the provider gave, 429s included, before any retry."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport(limits=POOL)
        self.statuses: List[int] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        self.statuses.append(response.status_code)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class Recorder2(Recorder):
    """`Recorder` over httpx2, for the Anthropic SDK."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport(limits=httpx2.Limits(max_connections=50, max_keepalive_connections=50))
        self.statuses = []


async def launch(one: Any) -> List[Any]:
    """Starts LOAD concurrent requests, in waves of 25 every 20 ms (all 500
    are in flight within half a second). Started all in one go, the SDKs'
    request building stalls the event loop for a second while the governor's
    queue keeps admitting on time; the permits granted meanwhile then leave
    together, in a bunch the provider refuses. Real traffic arrives spread
    out like the waves."""
    tasks = []
    for i in range(LOAD):
        tasks.append(asyncio.ensure_future(one(i)))
        if i % 25 == 24:
            await asyncio.sleep(0.02)
    return list(await asyncio.gather(*tasks))


def assert_provider_kept_happy(gov: llmgov.Governor, recorder: Recorder) -> None:
    """The governor keeps the load under the provider's limits. Should a
    request still be refused (the concurrency cap and the margin leave none
    in any run seen), the transport reports the 429 and retries it on the
    core's advice, and the caller never sees it; each such refusal is
    counted."""
    refused = recorder.statuses.count(429)
    assert refused <= LOAD // 20, f"the provider refused {refused} of {LOAD} admitted requests"
    assert gov.snapshot()["admitted_then_provider_rejected"] == refused


def waited(gov: llmgov.Governor) -> int:
    """The longest any request waited in the governor's queue, in ms."""
    return max((c["longest_admitted_wait_ms"] for c in gov.queue_metrics()["classes"]), default=0)


def limit_in_use(gov: llmgov.Governor, path: str, dimension: str) -> int:
    scope = next(s for s in gov.snapshot()["scopes"] if s["path"] == path)
    return next(lim["in_use"] for lim in scope["limits"] if lim["dimension"] == dimension)


async def test_openai_load_no_429_and_exact_reconciliation(mock_server_factory: Any) -> None:
    server = mock_server_factory(MOCK)
    gov = llmgov.Governor.from_dict(GOVERNOR)
    recorder = Recorder()
    # Fast counting: the tests run a debug build, where BPE is slow.
    transport = AsyncGovernedTransport(
        gov, paths=["openai/org/gpt-4o", "audit/openai"], transport=recorder, counting="fast"
    )
    client = openai.AsyncOpenAI(
        base_url=f"{server.url}/v1", api_key="sk-test", max_retries=0, http_client=httpx.AsyncClient(transport=transport)
    )

    async def one(i: int) -> Any:
        messages = [{"role": "user", "content": f"request {i}: say something about rate limits"}]
        return await client.chat.completions.create(model="gpt-4o", messages=messages, max_tokens=20)

    answers = await launch(one)
    # No 429 reached the caller: every request was answered.
    assert len(answers) == LOAD and recorder.statuses.count(200) == LOAD
    assert_provider_kept_happy(gov, recorder)
    charged = sum(a.usage.total_tokens for a in answers)
    assert limit_in_use(gov, "audit/openai", "tokens") == charged
    # One admission per request, and one more per provider refusal retried.
    assert gov.snapshot()["admitted"] == LOAD + recorder.statuses.count(429)
    assert waited(gov) > 1000, "requests hardly waited: the limits never bound"

    # What the server charged in all: its day-long window's remaining tokens.
    async with httpx.AsyncClient() as raw:
        probe = await raw.post(
            f"{server.url}/v1/chat/completions",
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1},
            headers={"authorization": "Bearer sk-test"},
        )
    assert probe.status_code == 200
    assert 100_000_000 - int(probe.headers["x-ratelimit-remaining-tokens"]) == charged
    await client.close()


async def test_anthropic_streaming_load_reconciles_exactly(mock_server_factory: Any) -> None:
    server = mock_server_factory(MOCK)
    gov = llmgov.Governor.from_dict(GOVERNOR)
    recorder = Recorder2()
    transport = AsyncGovernedTransport2(
        gov, paths=["anthropic/org/claude", "audit/anthropic"], transport=recorder, counting="fast"
    )
    client = anthropic.AsyncAnthropic(
        base_url=server.url, api_key="sk-ant-test", max_retries=0, http_client=httpx2.AsyncClient(transport=transport)
    )
    usage: Dict[str, int] = {"input": 0, "output": 0}

    async def one(i: int) -> None:
        async with client.messages.stream(
            model="claude-sonnet", max_tokens=20, messages=[{"role": "user", "content": f"stream {i} please"}]
        ) as stream:
            final = await stream.get_final_message()
        usage["input"] += final.usage.input_tokens
        usage["output"] += final.usage.output_tokens

    await launch(one)
    assert recorder.statuses.count(200) == LOAD
    assert_provider_kept_happy(gov, recorder)
    assert limit_in_use(gov, "audit/anthropic", "input_tokens") == usage["input"]
    assert limit_in_use(gov, "audit/anthropic", "output_tokens") == usage["output"]
    assert limit_in_use(gov, "anthropic/org/claude", "concurrency") == 0, "a stream kept its slot"
    await client.close()


def test_sync_openai_streaming_with_include_usage(mock_server_factory: Any) -> None:
    server = mock_server_factory(MOCK)
    gov = llmgov.Governor.from_dict(GOVERNOR, clock="monotonic")
    transport = GovernedTransport(gov, paths=["openai/org/gpt-4o", "audit/openai"], include_usage=True)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-test", max_retries=0, http_client=httpx.Client(transport=transport))
    chunks = list(
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hello there"}], max_tokens=12, stream=True
        )
    )
    final = chunks[-1]
    assert final.usage is not None, "include_usage was not added"
    assert limit_in_use(gov, "audit/openai", "tokens") == final.usage.total_tokens
    client.close()


async def test_provider_429_is_reported_and_retried_by_advice(mock_server_factory: Any) -> None:
    """The governor allows more than the provider: the provider's 429 is
    reported (the provider scope holds off) and retried after its
    retry-after, so the caller still sees no 429."""
    server = mock_server_factory(
        """
[openai]
shape = "openai"
limits = [{ dimension = "requests", amount = 2, window = "1s" }]
latency = { ttft_ms = 1, ms_per_output_token = 0.1 }
"""
    )
    gov = llmgov.Governor.from_dict(
        {"scopes": {"openai/org/gpt-4o": {"provider": True, "limits": [{"dimension": "requests", "amount": 100, "window": "1s"}]}}}
    )
    recorder = Recorder()
    transport = AsyncGovernedTransport(
        gov, paths="openai/org/gpt-4o", transport=recorder, retry=llmgov.RetryPolicy(max_retries=5)
    )
    client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="k", max_retries=0, http_client=httpx.AsyncClient(transport=transport))

    async def one() -> Any:
        return await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], max_tokens=5
        )

    answers = await asyncio.gather(*(one() for _ in range(4)))
    assert len(answers) == 4
    assert 429 in recorder.statuses, "the provider never refused: the test proves nothing"
    assert gov.snapshot()["admitted_then_provider_rejected"] == recorder.statuses.count(429)
    await client.close()


@pytest.mark.parametrize("status", [400, 401])
async def test_not_retryable_answer_is_returned_and_refunded(mock_server_factory: Any, status: int) -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"error": {"message": "no", "type": "invalid_request_error"}})

    gov = llmgov.Governor.from_dict(
        {"scopes": {"p": {"limits": [{"dimension": "tokens", "amount": 1000, "window": "1m"}]}}}, clock="manual"
    )
    transport = AsyncGovernedTransport(gov, paths="p", transport=httpx.MockTransport(handler))
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.post("http://x/v1/chat/completions", json={"model": "gpt-4o", "messages": [], "max_tokens": 50})
    assert response.status_code == status
    assert limit_in_use(gov, "p", "tokens") == 0


# Odd answers from a provider: the call's outcome is the provider's, and the
# permit never stays pending (reserved until its TTL).

ODD_GOVERNOR = {"scopes": {"p": {"limits": [{"dimension": "tokens", "amount": 100000, "window": "1m"}]}}}
ODD_BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 100}


def tokens_held(gov: llmgov.Governor) -> "tuple[int, int]":
    """(reserved by pending permits, used by settled ones) on scope `p`."""
    limit = gov.snapshot()["scopes"][0]["limits"][0]
    return limit["reserved"], limit["used"]


def settled_as(answer: Dict[str, Any]) -> "tuple[int, int]":
    """What the sync transport leaves on `p` after `answer`."""
    gov = llmgov.Governor.from_dict(ODD_GOVERNOR, clock="manual")
    handler = lambda request: httpx.Response(200, json=answer)  # noqa: E731
    with httpx.Client(transport=GovernedTransport(gov, paths="p", transport=httpx.MockTransport(handler))) as client:
        assert client.post("http://x/v1/chat/completions", json=ODD_BODY).status_code == 200
    return tokens_held(gov)


@pytest.mark.parametrize(
    "usage",
    [
        {},
        {"total_tokens": 8},
        {"prompt_tokens": -1, "completion_tokens": 3},
        {"prompt_tokens": "5", "completion_tokens": 3},
        {"prompt_tokens": 2**45, "completion_tokens": 3},
        {"prompt_tokens": 5, "completion_tokens": 2**41},
    ],
)
def test_a_usage_the_governor_refuses_settles_as_estimated(usage: Dict[str, Any]) -> None:
    estimated = settled_as({"choices": []})
    assert estimated[0] == 0 and estimated[1] > 100, "no usage: settled as estimated (prompt + max_tokens)"
    assert settled_as({"choices": [], "usage": usage}) == estimated
    # A plausible usage is still the one charged.
    assert settled_as({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}) == (0, 8)


class BrokenBody(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body cut off midway."""

    def __iter__(self) -> Any:
        yield b'{"usage":'
        raise httpx.ReadError("connection reset mid-body")

    async def __aiter__(self) -> Any:
        yield b'{"usage":'
        raise httpx.ReadError("connection reset mid-body")


@pytest.mark.parametrize(("status", "charged"), [(200, True), (429, False)])
def test_a_body_read_error_propagates_after_the_permit_is_finished(status: int, charged: bool) -> None:
    gov = llmgov.Governor.from_dict(ODD_GOVERNOR, clock="manual")
    handler = lambda request: httpx.Response(status, stream=BrokenBody())  # noqa: E731
    with httpx.Client(transport=GovernedTransport(gov, paths="p", transport=httpx.MockTransport(handler))) as client:
        with pytest.raises(httpx.ReadError):
            client.post("http://x/v1/chat/completions", json=ODD_BODY)
    reserved, used = tokens_held(gov)
    assert reserved == 0, "the permit was left pending"
    # A success is settled as estimated (the provider did the work); a refusal is refunded.
    assert (used > 100) == charged


async def test_an_async_body_read_error_settles_before_it_propagates() -> None:
    gov = llmgov.Governor.from_dict(ODD_GOVERNOR, clock="manual")
    handler = lambda request: httpx.Response(200, stream=BrokenBody())  # noqa: E731
    transport = AsyncGovernedTransport(gov, paths="p", transport=httpx.MockTransport(handler))
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.ReadError):
            await client.post("http://x/v1/chat/completions", json=ODD_BODY)
    reserved, used = tokens_held(gov)
    assert reserved == 0 and used > 100


async def test_an_async_call_cancelled_in_flight_settles_its_permit_as_estimated() -> None:
    """The caller's task cancelled while the request was in flight
    (`asyncio.wait_for` around an SDK call): CancelledError is not an
    httpx.TransportError, so the permit was left pending until its TTL."""
    gov = llmgov.Governor.from_dict(ODD_GOVERNOR, clock="manual")
    in_flight = asyncio.Event()

    async def never_answers(request: httpx.Request) -> httpx.Response:
        in_flight.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    transport = AsyncGovernedTransport(gov, paths="p", transport=httpx.MockTransport(never_answers))
    async with httpx.AsyncClient(transport=transport) as client:
        call = asyncio.ensure_future(client.post("http://x/v1/chat/completions", json=ODD_BODY))
        await in_flight.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    reserved, used = tokens_held(gov)
    # Never pending; charged as estimated, since the provider may have counted it.
    assert reserved == 0 and used > 100


@pytest.mark.parametrize(
    ("raised", "sent"),
    [
        (httpx.ReadTimeout, True),
        (httpx.WriteTimeout, True),
        (httpx.RemoteProtocolError, True),
        (httpx.ConnectError, False),
        (httpx.ConnectTimeout, False),
        (httpx.PoolTimeout, False),
    ],
)
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_a_transport_error_refunds_only_a_request_that_never_left(raised: type, sent: bool, asynchronous: bool) -> None:
    """A read timeout comes after the request was sent: the provider counts
    its input, so a refund would let the retry into a 429. A connection
    error comes before anything left, and is refunded."""
    gov = llmgov.Governor.from_dict(ODD_GOVERNOR, clock="manual")

    def failing(request: httpx.Request) -> httpx.Response:
        raise raised("no answer", request=request)

    options = dict(paths="p", transport=httpx.MockTransport(failing), retry=llmgov.RetryPolicy(max_retries=0))
    with pytest.raises(raised):
        if asynchronous:
            async with httpx.AsyncClient(transport=AsyncGovernedTransport(gov, **options)) as client:
                await client.post("http://x/v1/chat/completions", json=ODD_BODY)
        else:
            with httpx.Client(transport=GovernedTransport(gov, **options)) as client:
                client.post("http://x/v1/chat/completions", json=ODD_BODY)
    prompt = settled_as({"choices": []})[1] - 100  # the input estimate
    assert tokens_held(gov) == (0, prompt if sent else 0)


@pytest.mark.parametrize("raised", [KeyboardInterrupt, RuntimeError], ids=["KeyboardInterrupt", "a custom transport's bug"])
def test_a_sync_call_failing_with_other_than_a_transport_error_settles_its_permit(raised: type) -> None:
    gov = llmgov.Governor.from_dict(ODD_GOVERNOR, clock="manual")

    def broken(request: httpx.Request) -> httpx.Response:
        raise raised("not an httpx.TransportError")

    with httpx.Client(transport=GovernedTransport(gov, paths="p", transport=httpx.MockTransport(broken))) as client:
        with pytest.raises(raised):
            client.post("http://x/v1/chat/completions", json=ODD_BODY)
    reserved, used = tokens_held(gov)
    assert reserved == 0 and used > 100, "the permit was left pending"


def test_a_body_with_a_lone_surrogate_is_estimated_from_its_text_and_sent() -> None:
    """json.dumps escapes it as \\ud800, which the core's parser refuses:
    the estimate raised InvalidRequest and the request never left."""
    gov = llmgov.Governor.from_dict(ODD_GOVERNOR, clock="manual")
    sent = []

    def provider(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"usage": {"prompt_tokens": 7, "completion_tokens": 1}})

    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "half a pair: \ud800"}], "max_tokens": 10}
    with httpx.Client(transport=GovernedTransport(gov, paths="p", transport=httpx.MockTransport(provider))) as client:
        # httpx's json= cannot encode it; json.dumps escapes it, as an SDK may.
        assert client.post("http://x/v1/chat/completions", content=json.dumps(body).encode()).status_code == 200
    assert len(sent) == 1 and tokens_held(gov) == (0, 8)


def test_an_api_of_no_known_shape_is_estimated_by_its_input_as_in_node() -> None:
    """An embeddings body: its `input` counted exactly, as every binding
    estimates it, and no output, as it produces none."""
    text = "Token buckets refill at a steady rate. " * 20
    body = {"model": "text-embedding-3-small", "input": text}
    estimate = _wire.estimate("/v1/embeddings", body, json.dumps(body).encode(), 1024)
    assert (estimate.input_tokens, estimate.max_output_tokens) == (llmgov.count_tokens(text, model="gpt-4o"), 0)


def test_a_redirect_the_client_does_not_follow_is_refunded_as_in_node() -> None:
    """A 3xx serves no completion: it was settled as estimated."""
    gov = llmgov.Governor.from_dict(ODD_GOVERNOR, clock="manual")
    handler = lambda request: httpx.Response(307, headers={"location": "http://y/v1/chat/completions"})  # noqa: E731
    with httpx.Client(transport=GovernedTransport(gov, paths="p", transport=httpx.MockTransport(handler))) as client:
        assert client.post("http://x/v1/chat/completions", json=ODD_BODY).status_code == 307
    assert tokens_held(gov) == (0, 0)


def test_a_responses_request_with_tool_calls_and_reasoning_is_estimated_and_sent() -> None:
    """Items without a `role` (a function call, its output, a reasoning
    item) raised InvalidRequest in the estimate: the request never left."""
    gov = llmgov.Governor.from_dict(ODD_GOVERNOR, clock="manual")
    sent = []

    def provider(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"usage": {"input_tokens": 400, "output_tokens": 5}})

    payload = "word " * 300
    body = {
        "model": "gpt-4o",
        "input": [
            {"role": "user", "content": "weather in Paris?"},
            {"type": "reasoning", "id": "r", "summary": [{"type": "summary_text", "text": "look it up"}]},
            {"type": "function_call", "call_id": "c", "name": "weather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "c", "output": payload},
        ],
        "max_output_tokens": 100,
    }
    estimate = _wire.estimate("/v1/responses", body, json.dumps(body).encode(), 1024)
    assert estimate.input_tokens > 300 and estimate.max_output_tokens == 100, estimate
    with httpx.Client(transport=GovernedTransport(gov, paths="p", transport=httpx.MockTransport(provider))) as client:
        assert client.post("http://x/v1/responses", json=body).status_code == 200
    assert len(sent) == 1 and tokens_held(gov) == (0, 405)


def test_tool_call_arguments_and_results_count_in_the_estimate() -> None:
    """Agent loops carry most of their prompt in tool calls and results,
    which the estimate left out (2,000 tokens of arguments counted as none)."""
    arguments = json.dumps({"text": "word " * 500})
    call = {"role": "assistant", "tool_calls": [{"id": "t", "type": "function", "function": {"name": "f", "arguments": arguments}}]}
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "go"}, call], "max_tokens": 10}
    counted = _wire.estimate("/v1/chat/completions", body, json.dumps(body).encode(), 1024).input_tokens
    assert counted >= 500, counted
    result = {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "word " * 500}]}
    body = {"model": "claude", "max_tokens": 10, "messages": [{"role": "user", "content": [result]}]}
    assert _wire.estimate("/v1/messages", body, json.dumps(body).encode(), 1024).input_tokens >= 500


@pytest.mark.parametrize(
    "events",
    [
        [{"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "word " * 200}}]}}]}],
        [{"type": "response.function_call_arguments.delta", "delta": "word " * 200}],
        [{"type": "content_block_delta", "delta": {"type": "input_json_delta", "partial_json": "word " * 200}}],
        [{"type": "content_block_delta", "delta": {"type": "thinking_delta", "thinking": "word " * 200}}],
    ],
    ids=["openai tool call", "responses function call", "anthropic tool use", "anthropic thinking"],
)
def test_a_cut_stream_counts_the_tool_calls_and_thinking_it_carried(events: List[Dict[str, Any]]) -> None:
    usage = _wire.StreamUsage("gpt-4o")
    usage.feed(b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events))
    assert usage.output_tokens_seen() >= 200


def test_a_stream_whose_usage_the_governor_refuses_settles_the_output_it_carried() -> None:
    events = [
        {"choices": [{"delta": {"content": "hi there"}}]},
        {"choices": [], "usage": {"prompt_tokens": -1, "completion_tokens": 3}},
    ]
    sse = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    gov = llmgov.Governor.from_dict(ODD_GOVERNOR, clock="manual")
    # A stream not read yet (`content=` would hand the transport an answer already read).
    handler = lambda request: httpx.Response(200, stream=httpx.ByteStream(sse))  # noqa: E731
    body = dict(ODD_BODY, stream=True)
    with httpx.Client(transport=GovernedTransport(gov, paths="p", transport=httpx.MockTransport(handler))) as client:
        with client.stream("POST", "http://x/v1/chat/completions", json=body) as response:
            assert response.read() == sse
    reserved, used = tokens_held(gov)
    prompt = settled_as({"choices": []})[1] - 100  # the input estimate
    assert (reserved, used) == (0, prompt + llmgov.count_tokens("hi there", model="gpt-4o"))


def test_an_unknown_counting_names_the_field() -> None:
    gov = llmgov.Governor.from_dict(ODD_GOVERNOR, clock="manual")
    with pytest.raises(llmgov.InvalidRequest) as raised:
        GovernedTransport(gov, paths="p", counting="bogus")
    assert (raised.value.field, raised.value.value, raised.value.code) == ("counting", "'bogus'", "invalid_request")


@pytest.mark.parametrize("status", [200, 429])
def test_an_answer_that_outlived_the_permit_still_reaches_the_caller(status: int) -> None:
    """A call longer than the permit TTL: the permit expired meanwhile, charged
    as estimated. Finishing it is moot, and must not fail a served call."""
    gov = llmgov.Governor.from_dict(dict(ODD_GOVERNOR, permit_ttl="1m"), clock="manual")

    def slow(request: httpx.Request) -> httpx.Response:
        gov.advance(120_000)
        return httpx.Response(status, json={"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}})

    transport = GovernedTransport(gov, paths="p", transport=httpx.MockTransport(slow), retry=llmgov.RetryPolicy(max_retries=0))
    with httpx.Client(transport=transport) as client:
        assert client.post("http://x/v1/chat/completions", json=ODD_BODY).status_code == status
    assert gov.snapshot()["expired_permits"] == 1
