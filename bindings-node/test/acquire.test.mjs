// Waiting: `await gov.acquire(...)` on a manual clock. It resolves when
// capacity comes back (time, a settle), honours an AbortSignal (the request
// leaves the queue), and refuses what can never pass or cannot pass in time.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setImmediate as tick } from 'node:timers/promises';

import llmgov from '../dist/index.js';

const { Governor, DeadlineExceededError, NeverFitsError } = llmgov;

const gov = () =>
  Governor.fromToml(
    `
[scopes."openai/gpt-4o"]
limits = [{ dimension = "tokens", amount = 600, window = "1m" }]
[scopes."tenants/*"]
limits = [{ dimension = "concurrency", amount = 1 }]
`,
    { clock: 'manual' },
  );
const PATHS = ['tenants/acme', 'openai/gpt-4o'];

/** Whether `promise` has settled after the event loop has turned a few times. */
async function settled(promise) {
  let done = false;
  promise.then(() => (done = true), () => (done = true));
  for (let i = 0; i < 20; i++) await tick();
  return done;
}

const available = (g) => g.snapshot().scopes.find((s) => s.path === 'openai/gpt-4o').limits[0].available;

test('waits for refill, and resolves once the clock moves far enough', async () => {
  const g = gov();
  const first = await g.acquire({ paths: ['openai/gpt-4o'], inputTokens: 500 });
  first.settle({ inputTokens: 500 });
  const second = g.acquire({ paths: ['openai/gpt-4o'], inputTokens: 200 });
  assert.equal(await settled(second), false, 'waits: only 100 tokens left');
  g.advance(9_000);
  assert.equal(await settled(second), false, 'still 10 tokens short');
  g.advance(1_000);
  const permit = await second;
  assert.equal(permit.state, 'pending');
  assert.equal(available(g), 0);
});

test('a settle wakes the next waiter', async () => {
  const g = gov();
  const a = await g.acquire({ paths: PATHS, inputTokens: 10 });
  const b = g.acquire({ paths: PATHS, inputTokens: 10 });
  assert.equal(await settled(b), false, 'the tenant has one request in flight');
  a.settle({ inputTokens: 10, outputTokens: 0 });
  (await b).cancel();
});

test('an abort takes the request out of the queue and rejects with the reason', async () => {
  const g = gov();
  const a = await g.acquire({ paths: PATHS, inputTokens: 550 });
  const controller = new AbortController();
  const waiting = g.acquire({ paths: ['openai/gpt-4o'], inputTokens: 100, signal: controller.signal });
  assert.equal(await settled(waiting), false);
  controller.abort(new Error('caller went away'));
  await assert.rejects(waiting, /caller went away/);
  a.cancel();
  g.advance(60_000);
  // Nothing was reserved for the aborted request: the bucket is full again.
  assert.equal(available(g), 600);
  const aborted = AbortSignal.abort();
  await assert.rejects(g.acquire({ paths: PATHS, signal: aborted }), (e) => e.name === 'AbortError');
});

test('what can never pass, or not before the deadline, is refused at once', async () => {
  const g = gov();
  await assert.rejects(g.acquire({ paths: PATHS, inputTokens: 601 }), NeverFitsError);
  const a = await g.acquire({ paths: ['openai/gpt-4o'], inputTokens: 600 });
  await assert.rejects(g.acquire({ paths: ['openai/gpt-4o'], inputTokens: 600, deadlineMs: 100 }), (e) => {
    assert.ok(e instanceof DeadlineExceededError);
    assert.equal(e.code, 'deadline_exceeded');
    assert.ok(e.retryAfterMs === null || e.retryAfterMs > 100);
    return true;
  });
  a.cancel();
});

test('bad wait options are named', async () => {
  const g = gov();
  await assert.rejects(g.acquire({ paths: PATHS, priority: 1.5 }), (e) => e.code === 'invalid_request' && e.field === 'priority');
  await assert.rejects(g.acquire({ paths: PATHS, deadlineMs: -5 }), (e) => e.code === 'invalid_request' && e.field === 'deadlineMs');
  await assert.rejects(g.acquire({ paths: PATHS, inputTokens: NaN }), (e) => e.code === 'invalid_request' && e.field === 'inputTokens');
});

test('reserve: settles as estimated when left pending, cancels on a throw', async () => {
  const g = gov();
  const answer = await g.reserve({ paths: ['openai/gpt-4o'], inputTokens: 100 }, async (permit) => {
    assert.equal(permit.state, 'pending');
    return 'answer';
  });
  assert.equal(answer, 'answer');
  assert.equal(available(g), 500, 'settled as estimated');
  await assert.rejects(
    g.reserve({ paths: ['openai/gpt-4o'], inputTokens: 200 }, () => {
      throw new Error('the call failed');
    }),
    /the call failed/,
  );
  assert.equal(available(g), 500, 'cancelled: refunded');
  await g.reserve({ paths: ['openai/gpt-4o'], inputTokens: 100 }, (permit) => permit.settle({ inputTokens: 50 }));
  assert.equal(available(g), 450, 'settled by the body');
});

test('queue metrics count waiters, admissions and withdrawals', async () => {
  const g = gov();
  const first = await g.acquire({ paths: ['openai/gpt-4o'], inputTokens: 600 });
  const controller = new AbortController();
  const waiting = g.acquire({ paths: ['openai/gpt-4o'], inputTokens: 100, klass: 'batch', signal: controller.signal });
  const other = g.acquire({ paths: ['openai/gpt-4o'], inputTokens: 100, klass: 'batch' });
  await settled(other);
  const metrics = g.queueMetrics();
  assert.equal(metrics.depth, 2);
  const batch = metrics.classes.find((c) => c.klass === 'batch');
  assert.equal(batch.depth, 2);
  controller.abort();
  await assert.rejects(waiting);
  first.cancel();
  (await other).cancel();
  const after = g.queueMetrics().classes.find((c) => c.klass === 'batch');
  assert.equal(after.depth, 0);
  assert.equal(after.withdrawn, 1);
  assert.equal(after.admitted, 1);
});
