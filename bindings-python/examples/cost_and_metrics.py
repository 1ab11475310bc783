"""Cost budgets, metrics and `llmgov top`, runnable: `python examples/cost_and_metrics.py`."""

import json
import tempfile
from pathlib import Path

import llmgov

gov = llmgov.Governor.from_toml(
    """
    # A model's prices per 1M tokens, in any currency.
    [pricing.gpt-4o]
    input = 2.5
    cached_input = 1.25
    output = 10.0

    [scopes."openai/gpt-4o"]
    provider = true
    pricing = "gpt-4o"
    limits = [{ dimension = "tokens", amount = 30000, window = "1m" }]

    # Each tenant may spend 0.05 a day (counted in millionths: 50000).
    [scopes."tenants/*"]
    limits = [{ dimension = "cost", budget = 0.05, window = "1d" }]
    """,
    clock="manual",
)
route = gov.route(["tenants/acme", "openai/gpt-4o"])

# Reserved from the estimate (4000 input, 1000 max output: 0.02),
# then settled with the usage (200 output: 0.012).
permit = gov.try_acquire(route, 4000, 1000)
permit.settle(4000, 200)
gov.try_acquire(route, 10000, 1000).settle(10000, 1000)  # 0.035 more: 0.047 spent
try:
    gov.try_acquire(route, 1000, 200)  # 0.0045 more would pass 0.05
except llmgov.RateLimited as refused:
    print(f"refused on {refused.scope} {refused.dimension}")

# Everything observable, in one dict: prometheus() is drawn from it.
metrics = gov.metrics()
(tenant,) = [scope for scope in metrics["snapshot"]["scopes"] if scope["path"] == "tenants/acme"]
print("spent", tenant["limits"][0]["in_use"] / 1e6, "of 0.05")
print("refused", [(r["dimension"], r["gateway_decision"], r["count"]) for r in metrics["refusals"] if r["count"]])
print("retry amplification", metrics["retry_amplification"])
print(next(line for line in gov.prometheus().splitlines() if line.startswith('llmgov_in_use{scope="tenants/acme"')))

# `llmgov top` draws the JSON of metrics() from a file or an HTTP endpoint.
exposed = Path(tempfile.gettempdir()) / "llmgov-metrics.json"
exposed.write_text(json.dumps(metrics))
print(f"llmgov top {exposed}")
