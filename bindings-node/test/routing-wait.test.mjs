// Waiting by model profile: `await gov.acquireProfile(...)` on a manual
// clock (mirrors core/tests/routing_wait.rs). The waiter queues on the
// deployment that passes first among those its class may use; what can
// never pass is refused at once; an abort leaves nothing queued or held; a
// budget threshold crossed while waiting refuses and holds nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setImmediate as tick } from 'node:timers/promises';

import llmgov from '../dist/index.js';

const { Governor, RoutedPermit, DeadlineExceededError, NeverFitsError, RateLimitedError } = llmgov;

/** Whether `promise` has settled after the event loop has turned a few times. */
async function settled(promise) {
  let done = false;
  promise.then(() => (done = true), () => (done = true));
  for (let i = 0; i < 20; i++) await tick();
  return done;
}

/** A deployment taking one request per `secs` seconds. */
const pace = (secs) => ({
  provider: true,
  limits: [
    { dimension: 'requests', amount: 1, window: `${secs}s` },
    { dimension: 'tokens', amount: 10000, window: '1m' },
  ],
});

/** Three deployments taking one request per 10 s, 5 s and (the fallback) 2 s. */
const threePaces = () =>
  Governor.fromJson(
    {
      scopes: { 'a/org': pace(10), 'b/org': pace(5), 'c/org': pace(2) },
      profiles: {
        main: { deployments: ['a/org', 'b/org'], fallback: 'spare', fallback_allowed: { eval: false } },
        spare: { deployments: ['c/org'] },
      },
    },
    { clock: 'manual' },
  );

/** Every deployment busy: a, b, then the fallback c. */
function takeAll(g) {
  const taken = [0, 1, 2].map(() => g.tryAcquireProfile({ profile: 'main', inputTokens: 10 }).deployment);
  assert.deepEqual(taken, ['a/org', 'b/org', 'c/org']);
}

test('admitted at once where tryAcquireProfile would be', async () => {
  const g = threePaces();
  const permit = await g.acquireProfile({ profile: 'main', inputTokens: 10 });
  assert.ok(permit instanceof RoutedPermit);
  assert.deepEqual([permit.profile, permit.deployment, permit.fellBack, permit.degraded], ['main', 'a/org', false, false]);
  assert.equal(permit.state, 'pending');
});

test('a waiter queues on the deployment that passes first its class may use', async () => {
  const g = threePaces();
  takeAll(g);
  // Every deployment is busy: the fallback frees first (2 s).
  const any = g.acquireProfile({ profile: 'main', inputTokens: 10 });
  // A class that may not fall back waits on its own profile's soonest: b (5 s).
  const own = g.acquireProfile({ profile: 'main', inputTokens: 10, klass: 'eval' });
  assert.equal(await settled(any), false);
  assert.equal(await settled(own), false);

  g.advance(2_000);
  const fellBack = await any;
  assert.deepEqual([fellBack.deployment, fellBack.profile, fellBack.fellBack], ['c/org', 'spare', true]);
  assert.equal(await settled(own), false, 'eval never leaves its profile');
  g.advance(3_000);
  const routed = await own;
  assert.deepEqual([routed.deployment, routed.profile, routed.fellBack], ['b/org', 'main', false]);
  // The permit is charged on the deployment it names.
  routed.settle({ inputTokens: 10 });
  assert.equal(routed.state, 'settled');
});

test('what can never pass is refused at once, and a deadline too short too', async () => {
  const g = threePaces();
  await assert.rejects(g.acquireProfile({ profile: 'main', inputTokens: 20_000 }), (e) => {
    assert.ok(e instanceof NeverFitsError);
    assert.equal(e.dimension, 'tokens');
    return true;
  });
  takeAll(g);
  // The soonest deployment passes in 2 s: a 1 s deadline cannot be met.
  await assert.rejects(g.acquireProfile({ profile: 'main', inputTokens: 10, deadlineMs: 1_000 }), (e) => {
    assert.ok(e instanceof DeadlineExceededError);
    assert.equal(e.retryAfterMs, 2_000);
    return true;
  });
  assert.equal(g.snapshot().neverFits, 1);
  assert.equal(g.queueMetrics().depth, 0, 'neither was queued');
});

test('an abort takes the request out of the queue and holds nothing', async () => {
  const g = threePaces();
  takeAll(g);
  const controller = new AbortController();
  const waiting = g.acquireProfile({ profile: 'main', inputTokens: 10, signal: controller.signal });
  assert.equal(await settled(waiting), false);
  assert.equal(g.queueMetrics().depth, 1);
  controller.abort(new Error('caller went away'));
  await assert.rejects(waiting, /caller went away/);
  assert.equal(g.queueMetrics().depth, 0);
  // The fallback refills at 2 s and nobody took its slot: it is free.
  g.advance(2_000);
  assert.equal(g.livePermits(), 3, 'only the three taken before');
  assert.equal(g.tryAcquireProfile({ profile: 'main', inputTokens: 10 }).deployment, 'c/org');
  await assert.rejects(g.acquireProfile({ profile: 'main', signal: AbortSignal.abort() }), (e) => e.name === 'AbortError');
});

test('a budget threshold crossed while waiting refuses and holds nothing', async () => {
  const g = Governor.fromJson(
    {
      pricing: { 'gpt-4o': { input: 2.5, output: 10.0 } },
      scopes: {
        'openai/gpt-4o': { provider: true, pricing: 'gpt-4o', limits: [{ dimension: 'tokens', amount: 150_000, window: '1m' }] },
        'tenants/*': { limits: [{ dimension: 'cost', budget: 1.0, window: '1d' }] },
      },
      profiles: { 'gpt-4o': { deployments: ['openai/gpt-4o'], budget: { refuse_at: 0.3 } } },
    },
    { clock: 'manual' },
  );
  const profile = g.profile('gpt-4o', ['tenants/acme']);
  // 100k input: 0.25 each.
  g.tryAcquireProfile({ profile, inputTokens: 100_000 });
  const waiting = g.acquireProfile({ profile, inputTokens: 100_000 });
  assert.equal(await settled(waiting), false, '50k tokens left of 150k a minute');
  // Meanwhile a request straight on the route takes the spend to 0.35, and
  // 40k more tokens: 10k left, so the waiter needs 36 s of refill.
  g.tryAcquire({ paths: ['tenants/acme', 'openai/gpt-4o'], inputTokens: 40_000 });
  g.advance(35_000);
  assert.equal(await settled(waiting), false);
  g.advance(1_000);
  await assert.rejects(waiting, (e) => {
    assert.ok(e instanceof RateLimitedError);
    assert.deepEqual([e.dimension, e.scope], ['cost', 'tenants/acme']);
    return true;
  });
  const tenant = g.snapshot().scopes.find((s) => s.path === 'tenants/acme');
  assert.equal(tenant.limits.find((l) => l.dimension === 'cost').inUse, 350_000, "the waiter's permit was cancelled");
  assert.equal(g.livePermits(), 2);
});

test('bad input is named', async () => {
  const g = threePaces();
  await assert.rejects(g.acquireProfile({ profile: 'nope' }), (e) => e.code === 'invalid_request' && /known: main, spare/.test(e.message));
  await assert.rejects(g.acquireProfile({ profile: 'main', priority: 1.5 }), (e) => e.code === 'invalid_request' && e.field === 'priority');
  await assert.rejects(g.acquireProfile({ profile: 'main', deadlineMs: -5 }), (e) => e.code === 'invalid_request' && e.field === 'deadlineMs');
  await assert.rejects(g.acquireProfile({ profile: 'main', inputTokens: -1 }), (e) => e.code === 'invalid_request' && e.field === 'inputTokens');
  await assert.rejects(g.acquireProfile(null), (e) => e.code === 'invalid_request' && e.field === 'request');
});
