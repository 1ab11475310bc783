// The README's quick start, runnable: `node examples/quickstart.mjs`
// (after `npm install` in bindings-node). Tested by test/examples.test.mjs.
import llmgov from 'llmgov';

const { Governor, RateLimitedError, NeverFitsError } = llmgov;

const gov = Governor.fromToml(`
[scopes."openai/org-main/gpt-4o"]
limits = [
  { dimension = "requests", amount = 500, window = "1m" },
  { dimension = "tokens", amount = 30000, window = "1m" },
]
[scopes."tenants/*"]
limits = [{ dimension = "tokens", amount = 5000, window = "1m" }]
`);

// Resolve paths once; a route is a plain number you can cache.
const route = gov.route(['tenants/acme', 'openai/org-main/gpt-4o']);

// Reserve the prompt's tokens plus max_tokens, on both scopes, or nothing.
const permit = gov.tryAcquire({ route, inputTokens: 3000, maxOutputTokens: 1000 });
// … call the provider …
permit.settle({ inputTokens: 3000, outputTokens: 412 }); // refunds the unused output

try {
  gov.tryAcquire({ route, inputTokens: 3000, maxOutputTokens: 1000 });
} catch (e) {
  if (e instanceof RateLimitedError) {
    console.log(`${e.scope} is out of ${e.dimension}; retry after ${e.retryAfterMs} ms`);
  } else if (e instanceof NeverFitsError) {
    console.log(`${e.cost} ${e.dimension} can never fit ${e.scope} (holds ${e.burst}): shrink the request`);
  } else {
    throw e;
  }
}

// Or wait for capacity (a Promise; an AbortSignal stops the wait).
const waited = await gov.acquire({ route, inputTokens: 100, maxOutputTokens: 100, signal: AbortSignal.timeout(5000) });
waited.cancel();
console.log(`admitted ${gov.snapshot().admitted} requests`);
