// Permit.report and Permit.settle on a manual clock, as Python's Permit
// takes them: a Response in any state, and counts left out kept as reserved.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import llmgov from '../dist/index.js';

const { Governor, InvalidRequestError } = llmgov;

const CONFIG = {
  scopes: {
    'openai/org': {
      provider: true,
      limits: [
        { dimension: 'input_tokens', amount: 100000, window: '1m' },
        { dimension: 'output_tokens', amount: 100000, window: '1m' },
      ],
    },
  },
};
const gov = () => Governor.fromJson(CONFIG, { clock: 'manual' });
const inUse = (g) => {
  const limits = g.snapshot().scopes[0].limits;
  return Object.fromEntries(limits.map((l) => [l.dimension.replace('_tokens', ''), l.inUse]));
};
/** Settles within the microtasks of this turn, or says it is still pending (no timer). */
const soon = (promise) => Promise.race([promise, new Promise((resolve) => setImmediate(() => resolve('still pending')))]);

test('report(response) after the body was read reports the status and headers', async () => {
  const g = gov();
  const permit = g.tryAcquire({ paths: ['openai/org'], inputTokens: 10 });
  const response = new Response('{"error":{"code":"rate_limit_exceeded"}}', { status: 429, headers: { 'retry-after-ms': '1500' } });
  await response.json();
  const classification = await permit.report(response);
  assert.equal(classification.kind, 'rate_limited');
  assert.equal(classification.retryAfterMs, 1500);
  permit.cancel();
});

test('report(response) of a stream answers at once, leaving the stream to its reader', async () => {
  const g = gov();
  const permit = g.tryAcquire({ paths: ['openai/org'], inputTokens: 10 });
  const open = new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode('data: {"choices":[]}\n\n')); } });
  const response = new Response(open, { status: 200, headers: { 'content-type': 'text/event-stream', 'x-ratelimit-remaining-tokens': '5' } });
  const classification = await soon(permit.report(response));
  assert.notEqual(classification, 'still pending');
  assert.equal(classification.remaining.tokens, 5);
  assert.equal(response.bodyUsed, false);
  permit.cancel();
});

const invalid = (field, value) => (e) => {
  assert.ok(e instanceof InvalidRequestError, `${e?.name}: ${e?.message}`);
  assert.equal(e.field, field);
  if (value !== undefined) assert.equal(e.value, value);
  return true;
};

test('settle() settles as estimated, and a count left out keeps what was reserved for it, as in Python', () => {
  const g = gov();
  g.tryAcquire({ paths: ['openai/org'], inputTokens: 100, maxOutputTokens: 400 }).settle();
  assert.deepEqual(inUse(g), { input: 100, output: 400 });
  const permit = g.tryAcquire({ paths: ['openai/org'], inputTokens: 100, cachedInputTokens: 40, maxOutputTokens: 400 });
  permit.settle({ outputTokens: 5 });
  assert.equal(permit.state, 'settled');
  assert.deepEqual(inUse(g), { input: 200, output: 405 });
  g.tryAcquire({ paths: ['openai/org'], inputTokens: 100, maxOutputTokens: 400 }).settle({ cachedInputTokens: 0, outputTokens: 0 });
  assert.deepEqual(inUse(g), { input: 300, output: 405 });
  // The output left out keeps its reservation too (it was settled as 0).
  g.tryAcquire({ paths: ['openai/org'], inputTokens: 100, maxOutputTokens: 400 }).settle({ inputTokens: 50 });
  assert.deepEqual(inUse(g), { input: 350, output: 805 });
});

test('settle refuses a key of llmgov\'s usage it does not know, naming it', () => {
  const g = gov();
  const permit = g.tryAcquire({ paths: ['openai/org'], inputTokens: 100, maxOutputTokens: 400 });
  assert.throws(() => permit.settle({ inputTokens: 5, extra: 1 }), (e) => invalid('extra', '1')(e) && /is not a field of a usage/.test(e.reason));
  assert.throws(() => permit.settle({ outputTokens: 5, cachedInputToken: 1 }), (e) => invalid('cachedInputToken', '1')(e) && /did you mean cachedInputTokens\?/.test(e.reason));
  assert.equal(permit.state, 'pending');
  assert.deepEqual(inUse(g), { input: 100, output: 400 });
});

test('a bad count in a provider usage is refused under the name it was given', () => {
  const g = gov();
  const permit = g.tryAcquire({ paths: ['openai/org'], inputTokens: 100, maxOutputTokens: 400 });
  assert.throws(() => permit.settle({ input_tokens: 10, cache_read_input_tokens: 'x', output_tokens: 1 }), invalid('cache_read_input_tokens', '"x"'));
  assert.throws(() => permit.settle({ input_tokens: 10, cache_creation_input_tokens: 'y', output_tokens: 1 }), invalid('cache_creation_input_tokens', '"y"'));
  assert.throws(() => permit.settle({ input_tokens: 'z', cache_read_input_tokens: 1, output_tokens: 1 }), invalid('input_tokens', '"z"'));
  assert.throws(() => permit.settle({ prompt_tokens: 10, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 'w' } }), invalid('prompt_tokens_details.cached_tokens', '"w"'));
  assert.throws(() => permit.settle({ prompt_tokens: 10, completion_tokens: '1' }), invalid('completion_tokens', '"1"'));
  assert.equal(permit.state, 'pending');
});
