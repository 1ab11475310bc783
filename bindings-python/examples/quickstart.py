"""The README's quick start, runnable: `python examples/quickstart.py`."""

import llmgov

gov = llmgov.Governor.from_toml(
    """
    [scopes."openai/org-main/gpt-4o"]
    limits = [
      { dimension = "requests", amount = 500, window = "1m" },
      { dimension = "tokens", amount = 30000, window = "1m" },
    ]
    [scopes."tenants/*"]
    limits = [{ dimension = "tokens", amount = 5000, window = "1m" }]
    """,
    clock="manual",  # time moves only with gov.advance(ms): for tests and examples
)

route = ["tenants/acme", "openai/org-main/gpt-4o"]
messages = [{"role": "user", "content": "Summarise the rate-limit headers OpenAI sends."}]

# Reserve the prompt's tokens (counted exactly) plus max_tokens, on both scopes, or nothing.
permit = gov.try_acquire(route, messages=messages, model="gpt-4o", max_output_tokens=1000)
print("reserved", permit.charged)
# ... call the provider; then reconcile with what it used (an SDK usage object works too):
permit.settle({"prompt_tokens": permit.charged["input_tokens"], "completion_tokens": 412})

try:
    gov.try_acquire(route, input_tokens=4000, max_output_tokens=1000)
except llmgov.RateLimited as refused:
    print(f"{refused.scope} is out of {refused.dimension}; retry after {refused.retry_after_ms} ms")
    gov.advance(refused.retry_after_ms)
    with gov.try_acquire(route, input_tokens=4000, max_output_tokens=1000) as permit:
        permit.settle(output_tokens=300)  # an exception in the block would cancel it instead
except llmgov.NeverFits as never:
    print(f"{never.cost} {never.dimension} can never fit {never.scope}: shrink the request")

print("admitted", gov.snapshot()["admitted"])
