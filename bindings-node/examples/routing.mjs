// The README's routing, metrics and events example, runnable:
// `node examples/routing.mjs` (after `npm install` in bindings-node).
// Tested by test/examples.test.mjs.
import llmgov from 'llmgov';

const { Governor, RateLimitedError } = llmgov;

const gov = Governor.fromToml(`
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
fallback_allowed = { eval = false }
`);

// Events arrive as plain objects, after the call that raised them.
const firstDenial = new Promise((resolve) => {
  const stop = gov.onEvent((event) => {
    console.log('event:', JSON.stringify(event));
    stop();
    resolve(event);
  });
});

// Resolve a profile once for a consumer (its scopes are charged too).
const profile = gov.profile('gpt-4o', ['tenants/acme']);
const permit = gov.tryAcquireProfile({ profile, inputTokens: 6000, maxOutputTokens: 500 });
console.log(`${permit.profile} → ${permit.deployment}${permit.fellBack ? ' (fallback)' : ''}`);
const next = gov.tryAcquireProfile({ profile, inputTokens: 6000 }); // openai/org is 65% used
console.log(`${next.profile} → ${next.deployment}`);

try {
  gov.tryAcquireProfile({ profile, inputTokens: 6000 });
} catch (e) {
  if (!(e instanceof RateLimitedError)) throw e;
  console.log(`refused: ${e.code} on ${e.scope}`);
}
permit.settle({ inputTokens: 5800, outputTokens: 320 });
next.cancel();

// The Prometheus text exposition, for a /metrics endpoint.
const metrics = gov.prometheus();
console.log(metrics.split('\n').find((l) => l.startsWith('llmgov_admitted_total')));

// Or wait: at once if a deployment takes it, else in the queue of the one
// that frees first among those its class may use (azure, freed by the cancel).
const waited = await gov.acquireProfile({ profile, inputTokens: 6000, signal: AbortSignal.timeout(5000) });
console.log(`waited → ${waited.deployment}`);
waited.cancel();
// Listeners never keep the process alive: wait for what you need.
await firstDenial;
