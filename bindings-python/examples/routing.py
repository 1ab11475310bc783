"""Routing, metrics, events and planning, runnable: `python examples/routing.py`."""

import llmgov

gov = llmgov.Governor.from_toml(
    """
    adaptive = { breaker = { failures = 1, pauses = ["30s"] } }
    [scopes."openai/org"]
    provider = true
    limits = [{ dimension = "tokens", amount = 10000, window = "1m" }]
    [scopes."azure/eastus"]
    provider = true
    limits = [{ dimension = "tokens", amount = 8000, window = "1m" }]
    [scopes."tenants/*"]
    limits = [{ dimension = "tokens", amount = 100000, window = "1m" }]
    [profiles.gpt-4o]
    deployments = ["openai/org", "azure/eastus"]
    """,
    clock="manual",
)

# Events (denials, provider rejections, breaker changes) arrive as dicts, on
# whatever thread they happen; an exception in the hook never reaches here.
gov.set_event_hook(lambda event: print("event:", event))

# Resolve the profile for a tenant once; each acquire picks the deployment
# with the most headroom and says which.
profile = gov.profile("gpt-4o", paths="tenants/acme")
permit = gov.try_acquire_profile(profile, 6000, 500)
print("went to", permit.deployment)  # openai/org: both idle, the first in order
permit.report(503)  # the provider fails: its breaker opens (an event)
permit.settle(6000, 0)
second = gov.try_acquire_profile(profile, 1000, 500)
print("then to", second.deployment)  # azure/eastus
second.cancel()  # never sent: refund it rather than leave it to expire

# The hot path: a Route resolved once, positional counts.
route = gov.route(["tenants/acme", "azure/eastus"])
gov.try_acquire(route, 1000, 200).settle(1000, 150)

# Prometheus text for a /metrics endpoint.
print("\n".join(line for line in gov.prometheus().splitlines() if line.startswith("llmgov_limit{")))

# How many requests a minute 60 RPM and 100k TPM sustain for 2000-token requests.
plan = llmgov.plan_capacity(rpm=60, tpm=100_000, avg_input=1500, avg_output=500)
print(f"{plan['sustainable_rpm']:.1f} requests/min, {plan['binding']} binds")
