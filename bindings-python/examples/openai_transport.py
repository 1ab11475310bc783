"""Governs the OpenAI SDK with one transport, against `llmgov mock-server`.

    cargo run -p llmgov-cli -- mock-server --config cli/mock/test.toml --port 8080 &
    python examples/openai_transport.py http://127.0.0.1:8080
"""

import asyncio
import sys

import httpx
import openai

import llmgov
from llmgov.httpx import AsyncGovernedTransport


async def main(base_url: str) -> None:
    # cli/mock/test.toml allows two requests a minute; govern at that rate.
    gov = llmgov.Governor.from_dict(
        {"scopes": {"openai/test": {"provider": True, "limits": [{"dimension": "requests", "amount": 2, "window": "1m"}]}}}
    )
    # A request may wait in the governor's queue up to 2 s; the third would
    # wait 30 s for the refill, so it is refused at once, never sent.
    transport = AsyncGovernedTransport(gov, paths="openai/test", deadline_ms=2000)
    client = openai.AsyncOpenAI(
        base_url=f"{base_url}/v1", api_key="sk-test", max_retries=0, http_client=httpx.AsyncClient(transport=transport)
    )
    for i in range(3):
        try:
            answer = await client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": f"hello {i}"}], max_tokens=10
            )
            print(i, "answered, usage", answer.usage)
        except llmgov.DeadlineExceeded as refused:
            print(i, f"held back locally: it would wait {refused.retry_after_ms} ms, past its deadline")
    print("snapshot:", {k: v for k, v in gov.snapshot().items() if k != "scopes"})
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"))
