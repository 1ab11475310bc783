"""What an LLM API request asks for and what its answer used, read from the
JSON on the wire (OpenAI chat and Responses, Anthropic messages)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ._llmgov import InvalidRequest, _estimate_request, count_tokens, estimate_tokens

#: `max_tokens` assumed for a request that sets none (OpenAI's chat API lets
#: it out; reserving a model's whole context would starve everyone else).
DEFAULT_MAX_TOKENS = 1024


@dataclass
class Estimate:
    """The reservation a request needs."""

    model: str
    input_tokens: int
    max_output_tokens: int
    stream: bool
    shape: str  # "openai", "responses", "anthropic" or "other"


def shape_of(path: str) -> str:
    if path.endswith("/chat/completions"):
        return "openai"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        return "anthropic"
    return "other"


def estimate(
    path: str, body: Optional[Dict[str, Any]], raw: bytes, default_max_tokens: int, fast: bool = False
) -> Estimate:
    """The prompt's tokens (exact BPE counts where the shape is known, or the
    fast estimate) and the output to reserve, from a request body: the
    core's estimate, which every binding's HTTP client shares."""
    shape = shape_of(path)
    text = raw.decode("utf-8", "replace")
    if body is None:
        return Estimate("", estimate_tokens(text), 0, False, "other")
    given_model = body.get("model")
    model = given_model if isinstance(given_model, str) else ""
    stream = body.get("stream") is True
    try:
        input_tokens, max_out, _ = _estimate_request(text, shape, fast)
    except InvalidRequest:
        # JSON Python reads but the core's parser refuses (a lone surrogate,
        # which json.dumps escapes as \ud800): the provider may serve it,
        # so it is estimated from its text rather than stopped here.
        input_tokens, max_out = estimate_tokens(text), None
    # None, or a 0 no provider accepts: the request states no cap. An API of
    # no known shape (embeddings, say) produces no output unless it caps one.
    uncapped = 0 if shape == "other" else default_max_tokens
    return Estimate(model, input_tokens, max_out or uncapped, stream, shape)


def parse_json(raw: bytes) -> Optional[Dict[str, Any]]:
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


@dataclass
class StreamUsage:
    """Reads server-sent events as they pass and keeps the usage they report:
    OpenAI's final usage chunk, or Anthropic's `message_start` and
    `message_delta` usage. Without one, the streamed text is counted."""

    model: str
    usage: Optional[Dict[str, Any]] = None
    text: List[str] = field(default_factory=list)
    #: Whether the stream's end was seen (`[DONE]`, `message_stop`, ...).
    done: bool = False
    _pending: bytes = b""

    def feed(self, chunk: bytes) -> None:
        data = self._pending + chunk
        lines = data.split(b"\n")
        self._pending = lines.pop()
        for line in lines:
            self._line(line.rstrip(b"\r"))

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return
        event = parse_json(payload)
        if event is None:
            return
        usage = event.get("usage")
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            self._merge(message.get("usage"))
        elif kind == "message_delta":
            self._merge(usage)
        elif kind == "message_stop":
            self.done = True
        elif kind == "content_block_delta":
            # Text, a tool call's JSON as it streams, or extended thinking.
            delta = event.get("delta") or {}
            for key in ("text", "partial_json", "thinking"):
                if isinstance(delta.get(key), str):
                    self.text.append(delta[key])
        elif kind in ("response.completed", "response.incomplete"):
            self._merge((event.get("response") or {}).get("usage"))
            self.done = True
        elif kind in ("response.output_text.delta", "response.function_call_arguments.delta") and isinstance(
            event.get("delta"), str
        ):
            self.text.append(event["delta"])
        else:
            if isinstance(usage, dict):
                self._merge(usage)
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                if isinstance(delta.get("content"), str):
                    self.text.append(delta["content"])
                for call in delta.get("tool_calls") or []:
                    arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
                    if isinstance(arguments, str):
                        self.text.append(arguments)

    def _merge(self, usage: Any) -> None:
        if isinstance(usage, dict):
            merged = dict(self.usage or {})
            merged.update({k: v for k, v in usage.items() if v is not None})
            self.usage = merged

    def settle_args(self) -> Dict[str, Any]:
        """What to settle with: the reported usage; or, where the stream
        ended early or reported no output, the streamed text's tokens as the
        output (the input stays as estimated if nothing reported it)."""
        usage = dict(self.usage or {})
        reported_output = usage.get("output_tokens", usage.get("completion_tokens"))
        if usage and self.done and reported_output is not None:
            return {"usage": usage}
        seen = self.output_tokens_seen()
        output = max(seen, reported_output or 0)
        if "prompt_tokens" in usage or "input_tokens" in usage:
            usage["completion_tokens" if "prompt_tokens" in usage else "output_tokens"] = output
            return {"usage": usage}
        return {"output_tokens": output}

    def output_tokens_seen(self) -> int:
        """Tokens of the text streamed so far: the fallback when no usage came."""
        return count_tokens("".join(self.text), model=self.model or None)
