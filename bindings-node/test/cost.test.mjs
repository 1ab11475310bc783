// Cost budgets from Node on a manual clock: a pricing table prices the
// request, a `cost` limit refuses with dimension "cost" (as a thrown error
// and as an event), and a profile's budget thresholds degrade to the
// cheaper profile, then refuse; concurrent requests, some over their
// estimates, never overspend beyond the overages of those in flight.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setImmediate as tick } from 'node:timers/promises';

import llmgov from '../dist/index.js';

const { Governor, DeadlineExceededError, RateLimitedError, NeverFitsError } = llmgov;

/** A tenant budget of `budget` a day; gpt-4o degrades to mini past its thresholds. */
const governor = (budget, thresholds = {}) =>
  Governor.fromJson(
    {
      pricing: { 'gpt-4o': { input: 2.5, cached_input: 1.25, output: 10 }, mini: { input: 0.15, output: 0.6 } },
      scopes: {
        'openai/gpt-4o': { provider: true, pricing: 'gpt-4o', limits: [{ dimension: 'requests', amount: 10000, window: '1m' }] },
        'openai/mini': { provider: true, pricing: 'mini', limits: [{ dimension: 'requests', amount: 10000, window: '1m' }] },
        'tenants/*': { limits: [{ dimension: 'cost', budget, window: '1d', slots: 24 }] },
      },
      profiles: {
        'gpt-4o': { deployments: ['openai/gpt-4o'], budget: thresholds, fallback_allowed: { eval: false } },
        mini: { deployments: ['openai/mini'] },
      },
    },
    { clock: 'manual' },
  );
const cost = (g) =>
  g.snapshot().scopes.find((s) => s.path === 'tenants/acme').limits.find((l) => l.dimension === 'cost');
const PATHS = ['tenants/acme', 'openai/gpt-4o'];

test('a budget is reserved from the estimate, settled with usage, and refuses with dimension "cost"', async () => {
  const g = governor(0.01);
  const events = [];
  g.onEvent((event) => events.push(event));
  // 2000 input at 2.5 per 1M: 0.005, in millionths.
  const first = g.tryAcquire({ paths: PATHS, inputTokens: 2000, maxOutputTokens: 100 });
  assert.equal(cost(g).inUse, 5000 + 1000);
  first.settle({ inputTokens: 2000, outputTokens: 0 });
  assert.equal(cost(g).inUse, 5000);
  g.tryAcquire({ paths: PATHS, inputTokens: 2000 });
  assert.throws(() => g.tryAcquire({ paths: PATHS, inputTokens: 2000 }), (e) => {
    assert.ok(e instanceof RateLimitedError);
    assert.equal(e.code, 'rate_limited');
    assert.equal(e.dimension, 'cost');
    assert.equal(e.scope, 'tenants/acme');
    assert.equal(e.retryAfterMs, 25 * 3600 * 1000, 'a day of one-hour slots, plus the slot it is in');
    return true;
  });
  assert.throws(() => g.tryAcquire({ paths: ['tenants/beta', 'openai/gpt-4o'], inputTokens: 10_000 }), (e) =>
    e instanceof NeverFitsError && e.dimension === 'cost' && e.cost === 25_000 && e.burst === 10_000);
  for (let i = 0; i < 5; i++) await tick();
  assert.deepEqual(events[0], {
    event: 'denied', code: 'rate_limited', scope: 'tenants/acme', dimension: 'cost', retryAfterMs: 90_000_000, klass: '',
  });
});

test('profile budget thresholds degrade to the cheaper profile, then refuse on cost', () => {
  const g = governor(1.0, { degrade_at: 0.6, degrade_to: 'mini', refuse_at: 0.85 });
  const profile = g.profile('gpt-4o', ['tenants/acme']);
  // 100k input on gpt-4o: 0.25 each.
  for (let i = 0; i < 3; i++) {
    const p = g.tryAcquireProfile({ profile, inputTokens: 100_000 });
    assert.deepEqual([p.profile, p.degraded, p.fellBack], ['gpt-4o', false, false]);
  }
  const cheap = g.tryAcquireProfile({ profile, inputTokens: 100_000 });
  assert.deepEqual([cheap.profile, cheap.deployment, cheap.degraded, cheap.fellBack], ['mini', 'openai/mini', true, false]);
  assert.equal(cost(g).inUse, 765_000, '75% + 0.015 on mini');
  assert.throws(() => g.tryAcquireProfile({ profile, inputTokens: 100_000, klass: 'eval' }), (e) =>
    e instanceof RateLimitedError && e.dimension === 'cost' && e.scope === 'tenants/acme');
  for (let i = 0; i < 6; i++) g.tryAcquireProfile({ profile, inputTokens: 100_000 });
  assert.equal(cost(g).inUse, 855_000);
  assert.throws(() => g.tryAcquireProfile({ profile, inputTokens: 100_000 }), (e) =>
    e instanceof RateLimitedError && e.dimension === 'cost' && e.retryAfterMs > 24 * 3600 * 1000);
});

test('concurrent requests spend a budget no further than the overages of those in flight when it ran out', async () => {
  // 1000 input + 500 max output reserve 0.0075 on gpt-4o; one request in
  // three uses 600..900 output, 1000..4000 millionths over its reservation.
  const ESTIMATE = 7500;
  const g = governor(0.5);
  const route = g.route(PATHS);
  const budget = cost(g).amount;
  assert.equal(budget, 500_000);
  let spent = 0;
  let calls = 0; // orders acquires and settles: every admission happens inside its acquire call
  let lastAdmission = 0;
  let inFlight = 0;
  let mostInFlight = 0;
  let admitted = 0;
  let refused = 0;
  const settles = []; // { call, over } of each settle

  async function worker(w) {
    for (let i = 0; i < 40; i++) {
      const call = ++calls;
      // Admitted at once or refused at once: no waiter is woken by another's settle.
      const pending = g.acquire({ route, inputTokens: 1000, maxOutputTokens: 500, deadlineMs: 0 });
      const inUse = cost(g).inUse; // the admission, if any, has happened
      let permit;
      try {
        permit = await pending;
      } catch (e) {
        assert.ok(e instanceof DeadlineExceededError, `${e}`);
        refused++;
        await tick();
        continue;
      }
      admitted++;
      lastAdmission = call;
      mostInFlight = Math.max(mostInFlight, ++inFlight);
      assert.ok(inUse <= budget, `an admission took the budget to ${inUse}`);
      // Held while the other workers acquire and settle.
      await tick();
      await tick();
      const output = (w + i) % 3 === 0 ? 600 + ((w * 31 + i * 17) % 301) : 100 + ((w * 7 + i * 13) % 401);
      permit.settle({ inputTokens: 1000, outputTokens: output });
      inFlight--;
      const charged = 2500 + output * 10;
      settles.push({ call: ++calls, over: Math.max(0, charged - ESTIMATE) });
      spent += charged;
    }
  }
  await Promise.all(Array.from({ length: 16 }, (_, w) => worker(w)));

  assert.ok(mostInFlight > 8, `concurrent: ${mostInFlight} in flight at most`);
  assert.ok(refused > admitted, `the budget ran out: ${admitted} admitted, ${refused} refused`);
  assert.equal(cost(g).inUse, spent, 'the budget holds exactly the settled costs');
  // Past the budget only by what the requests in flight at the last
  // admission ran over, each by at most one request's overage.
  const lateOverages = settles.filter((s) => s.call > lastAdmission);
  const overspendAllowed = lateOverages.reduce((sum, s) => sum + s.over, 0);
  assert.ok(spent > budget, `the overages took it past the budget: ${spent}`);
  assert.ok(spent <= budget + overspendAllowed, `spent ${spent} of ${budget}, ${overspendAllowed} allowed`);
  assert.ok(lateOverages.length <= mostInFlight && overspendAllowed <= lateOverages.length * 4000);
  // Admissions stopped once it was spent, and not before less than one estimate was left.
  assert.ok(spent > budget - ESTIMATE);
  assert.throws(() => g.tryAcquire({ route, inputTokens: 1000, maxOutputTokens: 500 }), (e) =>
    e instanceof RateLimitedError && e.dimension === 'cost' && e.scope === 'tenants/acme');
});
