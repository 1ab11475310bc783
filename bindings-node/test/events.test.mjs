// The event hook: denials, provider rejections and breaker changes reach
// `gov.onEvent` listeners as plain objects, after the call that raised them;
// a throwing listener is a warning, not a crash; listeners never keep the
// process alive (but the events of its own last calls are delivered); a
// flood past the queue is dropped and counted.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setImmediate as tick } from 'node:timers/promises';

import llmgov from '../dist/index.js';

const { Governor, RateLimitedError } = llmgov;

const TOML = `
[adaptive.breaker]
failures = 2
pauses = ["10s"]
[scopes."openai/org"]
provider = true
limits = [{ dimension = "tokens", amount = 600, window = "1m" }]
`;
const gov = () => Governor.fromToml(TOML, { clock: 'manual' });

/** Lets the event loop run until queued events have been delivered. */
async function drain() {
  for (let i = 0; i < 5; i++) await tick();
}

test('a denial reaches the listener as a plain object, after the refused call returned', async () => {
  const g = gov();
  const seen = [];
  g.onEvent((event) => seen.push(event));
  g.tryAcquire({ paths: ['openai/org'], inputTokens: 500 });
  assert.throws(() => g.tryAcquire({ paths: ['openai/org'], inputTokens: 200, klass: 'batch' }), RateLimitedError);
  assert.equal(seen.length, 0, 'delivered asynchronously, not from inside the core');
  await drain();
  assert.deepEqual(seen, [
    { event: 'denied', code: 'rate_limited', scope: 'openai/org', dimension: 'tokens', retryAfterMs: 10_000, klass: 'batch' },
  ]);
  assert.equal(Object.getPrototypeOf(seen[0]), Object.prototype);
});

test('provider rejections and breaker changes reach the listener, in order', async () => {
  const g = gov();
  const seen = [];
  g.onEvent((event) => seen.push(event));
  const permit = g.tryAcquire({ paths: ['openai/org'], inputTokens: 500 });
  permit.report(429, { 'retry-after': '1' }, { error: { type: 'tokens', code: 'rate_limit_exceeded' } });
  permit.report(503, { 'retry-after': '1' }, '');
  permit.cancel();
  const [org] = g.snapshot().scopes;
  assert.equal(org.breaker, 'open');
  assert.ok(org.limits[0].effectiveAmount < 600, `the 429 lowered the pace: ${org.limits[0].effectiveAmount}`);
  g.advance(10_000);
  const probe = g.tryAcquire({ paths: ['openai/org'] });
  probe.report(200, {}, '{}');
  probe.settle({ inputTokens: 0 });
  await drain();
  assert.deepEqual(seen, [
    { event: 'provider_rejected', scopes: ['openai/org'], kind: 'rate_limited', dimension: 'tokens', retryAfterMs: 1000 },
    { event: 'provider_rejected', scopes: ['openai/org'], kind: 'overloaded', dimension: 'unknown', retryAfterMs: 1000 },
    { event: 'breaker_changed', scope: 'openai/org', state: 'open' },
    { event: 'breaker_changed', scope: 'openai/org', state: 'closed' },
  ]);
  assert.equal(g.snapshot().scopes[0].breaker, 'closed');
});

test('a refusal by an open breaker counts in the snapshot', () => {
  const g = gov();
  const permit = g.tryAcquire({ paths: ['openai/org'] });
  permit.report(503, {}, '');
  permit.report(503, {}, '');
  permit.cancel();
  assert.equal(g.snapshot().scopes[0].breaker, 'open');
  assert.throws(() => g.tryAcquire({ paths: ['openai/org'] }), (e) => e.code === 'circuit_open');
  assert.equal(g.snapshot().circuitOpen, 1);
});

test('a listener may use the governor; several listeners; removing them stops delivery', async () => {
  const g = gov();
  const inUse = [];
  const second = [];
  const stop = g.onEvent(() => inUse.push(g.snapshot().scopes[0].limits[0].inUse));
  const stopSecond = g.onEvent((event) => second.push(event.code));
  g.tryAcquire({ paths: ['openai/org'], inputTokens: 500 });
  assert.throws(() => g.tryAcquire({ paths: ['openai/org'], inputTokens: 200 }));
  await drain();
  assert.deepEqual(inUse, [500]);
  assert.deepEqual(second, ['rate_limited']);
  stop();
  stop(); // twice is harmless
  stopSecond();
  assert.throws(() => g.tryAcquire({ paths: ['openai/org'], inputTokens: 200 }));
  await drain();
  assert.deepEqual([inUse.length, second.length], [1, 1], 'no listener, no delivery');
  const again = [];
  g.onEvent((event) => again.push(event.event));
  assert.throws(() => g.tryAcquire({ paths: ['openai/org'], inputTokens: 200 }));
  await drain();
  assert.deepEqual(again, ['denied'], 'a listener can be set again');
  assert.throws(() => g.onEvent('not a function'), (e) => e.code === 'invalid_request' && e.field === 'listener');
});

test('a listener that throws or rejects is a process warning, and the others still hear', async () => {
  const g = gov();
  const warnings = [];
  const onWarning = (w) => warnings.push(w);
  process.on('warning', onWarning);
  try {
    const heard = [];
    g.onEvent(() => {
      throw new Error('listener bug');
    });
    g.onEvent(async () => {
      throw new Error('async listener bug');
    });
    g.onEvent((event) => heard.push(event.code));
    g.tryAcquire({ paths: ['openai/org'], inputTokens: 500 });
    assert.throws(() => g.tryAcquire({ paths: ['openai/org'], inputTokens: 200 }));
    await drain();
    assert.deepEqual(heard, ['rate_limited']);
    while (warnings.length < 2) await once(process, 'warning');
    assert.deepEqual(warnings.map((w) => w.name), ['LlmgovEventListenerWarning', 'LlmgovEventListenerWarning']);
    assert.match(warnings[0].message, /listener threw on a denied event: Error: listener bug/);
    assert.match(warnings[1].message, /async listener bug/);
  } finally {
    process.off('warning', onWarning);
  }
});

test('past 4096 events waiting for the thread, events are dropped and counted', async () => {
  const g = gov();
  let heard = 0;
  g.onEvent(() => heard++);
  g.tryAcquire({ paths: ['openai/org'], inputTokens: 500 });
  // One synchronous burst: the thread delivers nothing until it ends.
  for (let i = 0; i < 5000; i++) assert.throws(() => g.tryAcquire({ paths: ['openai/org'], inputTokens: 200 }));
  await drain();
  assert.equal(heard, 4096);
  assert.equal(g.droppedEvents(), 5000 - 4096);
});

test('a listener does not keep the process alive, yet hears the refusals of its last calls', () => {
  const dist = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'index.js');
  const script = `
    const { Governor } = require(${JSON.stringify(dist)});
    const g = Governor.fromToml(${JSON.stringify(TOML)});
    g.onEvent((e) => console.log('event', e.code));
    g.tryAcquire({ paths: ['openai/org'], inputTokens: 500 });
    try { g.tryAcquire({ paths: ['openai/org'], inputTokens: 200 }); } catch {}
  `;
  // A listener that held the event loop would keep the child running
  // until the timeout; one that never did would let it exit before the
  // refusal's event was delivered.
  const child = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(child.error, undefined, 'exited by itself');
  assert.equal(child.status, 0, child.stderr);
  assert.equal(child.stdout, 'event rate_limited\n');
});
