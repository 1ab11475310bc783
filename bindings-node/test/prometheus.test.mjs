// `gov.prometheus()`: the state in the Prometheus text format, per scope and
// dimension, with the counters, breakers, queues, refusals by who refused,
// estimate errors and retry amplification, on a manual clock; and the same
// figures through `gov.metrics()`, which the text is drawn from.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setImmediate as tick } from 'node:timers/promises';

import llmgov from '../dist/index.js';

const { Governor } = llmgov;

/** The value of the first sample whose line starts with `prefix`. */
function value(text, prefix) {
  const line = text.split('\n').find((l) => l.startsWith(prefix));
  assert.ok(line, `no \`${prefix}\` in\n${text}`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

/** Scope `path`'s limit of `dimension` over `windowMs` (none for concurrency), as `metrics()` has it. */
function limitOf(metrics, path, dimension, windowMs) {
  const scope = metrics.snapshot.scopes.find((s) => s.path === path);
  assert.ok(scope, `no scope ${path}`);
  const limit = scope.limits.find((l) => l.dimension === dimension && l.windowMs === windowMs);
  assert.ok(limit, `no ${dimension} limit over ${windowMs} ms on ${path}`);
  return limit;
}

/** The count of refusals naming `dimension` by `gatewayDecision`, as `metrics()` has it. */
function refusals(metrics, dimension, gatewayDecision) {
  const entry = metrics.refusals.find((r) => r.dimension === dimension && r.gatewayDecision === gatewayDecision);
  assert.ok(entry, `no refusal entry ${dimension}/${gatewayDecision}`);
  return entry.count;
}

/** The default class's queue, as `metrics()` has it. */
const defaultClass = (metrics) => metrics.queues.classes.find((c) => c.klass === '');

test('limits, usage, counters, breakers, refusals, estimate errors and retry amplification are exposed', () => {
  // A decrease exact in binary keeps the effective burst a whole number.
  const g = Governor.fromToml(
    `
[adaptive]
decrease = 0.75
[scopes."openai/org"]
provider = true
limits = [
  { dimension = "requests", amount = 500, window = "1m" },
  { dimension = "tokens", amount = 30000, window = "1m" },
  { dimension = "tokens", amount = 1000000, window = "1d" },
]
[scopes."tenants/*"]
limits = [{ dimension = "concurrency", amount = 2 }]
`,
    { clock: 'manual' },
  );
  const route = g.route(['tenants/acme', 'openai/org']);
  const permit = g.tryAcquire({ route, inputTokens: 6000 });
  g.tryAcquire({ route, inputTokens: 100 });
  assert.throws(() => g.tryAcquire({ route }), { code: 'rate_limited' }, 'two in flight at most');
  permit.report(429, { 'retry-after': '2' }, { error: { type: 'tokens', code: 'rate_limit_exceeded' } });
  permit.settle({ inputTokens: 6000 });
  g.advance(2000);

  const text = g.prometheus();
  assert.equal(typeof text, 'string');
  const tokens = '{scope="openai/org",dimension="tokens",window_ms="60000"}';
  assert.equal(value(text, `llmgov_limit${tokens}`), 30000);
  assert.equal(value(text, `llmgov_limit_effective${tokens}`), 22500, 'AIMD took it to 0.75');
  assert.equal(value(text, `llmgov_in_use${tokens}`), 22500, "empty as the 429's cooldown ends");
  const daily = '{scope="openai/org",dimension="tokens",window_ms="86400000"}';
  assert.equal(value(text, `llmgov_in_use${daily}`), 6077, '6100 less 2 s of 1M a day');
  assert.equal(value(text, `llmgov_reserved${daily}`), 100, 'the permit still held');
  assert.equal(value(text, `llmgov_used${daily}`), 5977);
  const slots = '{scope="tenants/acme",dimension="concurrency",window_ms="none"}';
  assert.equal(value(text, `llmgov_utilisation${slots}`), 0.5);
  assert.equal(value(text, `llmgov_reserved${slots}`), 1);
  assert.equal(value(text, 'llmgov_admitted_total'), 2);
  assert.equal(value(text, 'llmgov_rate_limited_total'), 1);
  assert.equal(value(text, 'llmgov_provider_rejected_total'), 1);
  assert.equal(value(text, 'llmgov_breaker{scope="openai/org",state="closed"}'), 1);
  // Refusals by dimension and by who refused: here, and by the provider.
  const refused = (dimension, decision) => `llmgov_refusals_total{dimension="${dimension}",gateway_decision="${decision}"}`;
  assert.equal(value(text, refused('concurrency', 'rejected_locally')), 1);
  assert.equal(value(text, refused('tokens', 'admitted_then_provider_rejected')), 1);
  assert.equal(value(text, refused('requests', 'rejected_locally')), 0);
  assert.equal(value(text, refused('tokens', 'rejected_locally')), 0);
  // One of two admitted was refused by the provider: two sent per success.
  assert.equal(value(text, 'llmgov_retry_amplification'), 2);
  // The estimate was exact: no error on input, from one sample.
  const input = 'route="openai/org",side="input"';
  assert.equal(value(text, `llmgov_estimate_error{${input},quantile="0.5"}`), 0);
  assert.equal(value(text, `llmgov_estimate_samples_total{${input}}`), 1);
  assert.match(text, /^# TYPE llmgov_limit gauge$/m);
  assert.match(text, /^# TYPE llmgov_refusals counter$/m);
  assert.match(text, /# EOF\n?$/);

  // The same figures through metrics().
  const m = g.metrics();
  const perMinute = limitOf(m, 'openai/org', 'tokens', 60000);
  assert.deepEqual([perMinute.amount, perMinute.effectiveAmount, perMinute.inUse], [30000, 22500, 22500]);
  const perDay = limitOf(m, 'openai/org', 'tokens', 86400000);
  assert.deepEqual([perDay.inUse, perDay.reserved, perDay.used], [6077, 100, 5977]);
  const tenant = limitOf(m, 'tenants/acme', 'concurrency', undefined);
  assert.deepEqual([tenant.inUse, tenant.reserved, tenant.amount], [1, 1, 2]);
  assert.deepEqual([m.snapshot.admitted, m.snapshot.rateLimited, m.snapshot.admittedThenProviderRejected], [2, 1, 1]);
  assert.equal(refusals(m, 'concurrency', 'rejected_locally'), 1);
  assert.equal(refusals(m, 'tokens', 'admitted_then_provider_rejected'), 1);
  assert.equal(refusals(m, 'requests', 'rejected_locally'), 0);
  assert.equal(m.retryAmplification, 2);
  const estimate = m.estimateErrors.find((e) => e.side === 'input');
  assert.deepEqual(estimate, { scopes: ['openai/org'], side: 'input', samples: 1, p05: 0, p50: 0, p95: 0 });
});

test('queue depth and oldest waiter while a waiter is pending, and expired permits once past the TTL', async () => {
  const g = Governor.fromJson(
    { permit_ttl: '1m', scopes: { p: { limits: [{ dimension: 'requests', amount: 1, window: '1m' }] } } },
    { clock: 'manual' },
  );
  const route = g.route(['p']);
  g.tryAcquire({ route }); // held past its TTL: it expires unsettled
  let admitted = false;
  const waiter = g.acquire({ route }).then((permit) => ((admitted = true), permit));
  g.advance(1500);
  for (let i = 0; i < 10; i++) await tick();
  assert.equal(admitted, false, 'still waiting: the window holds one request a minute');

  let text = g.prometheus();
  assert.equal(value(text, 'llmgov_queue_depth{class=""}'), 1);
  assert.equal(value(text, 'llmgov_queue_oldest_wait_seconds{class=""}'), 1.5);
  assert.equal(value(text, 'llmgov_expired_permits_total'), 0, 'not yet');
  let m = g.metrics();
  assert.equal(m.queues.depth, 1);
  assert.deepEqual([defaultClass(m).depth, defaultClass(m).oldestWaitMs, defaultClass(m).tenants], [1, 1500, 1]);

  // Past the window the waiter passes; past the TTL the first expires.
  g.advance(120_000);
  (await waiter).settle({ inputTokens: 0 });
  text = g.prometheus();
  assert.equal(value(text, 'llmgov_queue_depth{class=""}'), 0);
  assert.equal(value(text, 'llmgov_queue_oldest_wait_seconds{class=""}'), 0);
  assert.equal(value(text, 'llmgov_expired_permits_total'), 1);
  assert.equal(value(text, 'llmgov_queue_admitted_total{class=""}'), 1);
  assert.equal(value(text, 'llmgov_queue_wait_seconds_bucket{le="60.0",class=""}'), 0);
  assert.equal(value(text, 'llmgov_queue_wait_seconds_bucket{le="600.0",class=""}'), 1, 'waited 121.5 s');
  m = g.metrics();
  assert.equal(m.snapshot.expiredPermits, 1);
  assert.deepEqual([defaultClass(m).depth, defaultClass(m).oldestWaitMs, defaultClass(m).longestAdmittedWaitMs], [0, 0, 121_500]);
});

test('waits and borrowed capacity are exposed per class', async () => {
  // A tenant guaranteed 100 tokens a minute: its first 100 are its own,
  // what it gets past them is borrowed.
  const g = Governor.fromJson(
    {
      scopes: {
        p: { limits: [{ dimension: 'requests', amount: 1, window: '1s' }] },
        'tenants/*': { limits: [{ dimension: 'concurrency', amount: 10 }] },
      },
      shares: { 'tenants/*': { guarantee: 100, window: '1m' } },
    },
    { clock: 'manual' },
  );
  const route = g.route(['tenants/acme', 'p']);
  g.tryAcquire({ route, inputTokens: 100 });
  // Two waiters: admitted after 1 s and 2 s.
  const waiting = [g.acquire({ route, inputTokens: 100 }), g.acquire({ route, inputTokens: 100 })];
  g.advance(1000);
  g.advance(1000);
  await Promise.all(waiting);

  const text = g.prometheus();
  assert.match(text, /^# TYPE llmgov_queue_wait_seconds histogram$/m);
  assert.equal(value(text, 'llmgov_queue_wait_seconds_bucket{le="0.5",class=""}'), 0);
  assert.equal(value(text, 'llmgov_queue_wait_seconds_bucket{le="1.0",class=""}'), 1);
  assert.equal(value(text, 'llmgov_queue_wait_seconds_bucket{le="2.5",class=""}'), 2);
  assert.equal(value(text, 'llmgov_queue_wait_seconds_bucket{le="+Inf",class=""}'), 2);
  assert.equal(value(text, 'llmgov_queue_wait_seconds_count{class=""}'), 2);
  assert.equal(value(text, 'llmgov_queue_wait_seconds_sum{class=""}'), 3);
  assert.equal(value(text, 'llmgov_queue_borrowed_tokens_total{class=""}'), 100, "the second one's");

  // The same through metrics(): buckets not cumulative, bounds in ms.
  const queue = defaultClass(g.metrics());
  assert.deepEqual(queue.wait.boundsMs, [1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 60000, 600000, Infinity]);
  assert.deepEqual(queue.wait.counts, [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0]);
  assert.deepEqual([queue.wait.count, queue.wait.sumMs], [2, 3000]);
  assert.deepEqual([queue.admitted, queue.borrowedTokens, queue.longestAdmittedWaitMs], [2, 100, 2000]);
  assert.deepEqual(g.queueMetrics(), g.metrics().queues, 'queueMetrics() is the same conversion');
});
