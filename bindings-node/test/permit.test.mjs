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
