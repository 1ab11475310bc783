// `gov.metrics()` (everything observable, camelCase, the same conversions as
// `snapshot()` and `queueMetrics()`) and `gov.metricsJson()` (the core's
// JSON text, unchanged), which `llmgov top` reads.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import llmgov from '../dist/index.js';
import { llmgovBinary } from './helpers/mock-server.mjs';

const { Governor } = llmgov;

/**
 * A provider scope with AIMD (decrease 0.5) and a tenant's concurrency: a
 * permit of 2500 tokens held, a 429 on tokens reported for it, a request
 * refused here on tokens, one admitted after a wait in class `batch`, and
 * one settled 10% over its estimate.
 */
async function busy() {
  const g = Governor.fromJson(
    {
      adaptive: { decrease: 0.5 },
      scopes: {
        'openai/org': { provider: true, limits: [{ dimension: 'tokens', amount: 10000, window: '1m' }] },
        'tenants/*': { limits: [{ dimension: 'concurrency', amount: 4 }] },
      },
    },
    { clock: 'manual' },
  );
  const route = g.route(['tenants/acme', 'openai/org']);
  const settledOver = g.tryAcquire({ route, inputTokens: 1000 });
  settledOver.settle({ inputTokens: 1100 });
  const held = g.tryAcquire({ route, inputTokens: 2500 });
  held.report(429, { 'retry-after': '0' }, { error: { type: 'tokens', code: 'rate_limit_exceeded' } });
  assert.throws(() => g.tryAcquire({ route, inputTokens: 4000 }), { code: 'rate_limited', dimension: 'tokens' });
  const waiting = g.acquire({ route, inputTokens: 100, klass: 'batch' });
  g.advance(3000); // 2500 tokens refilled at 5000 a minute (AIMD's half)
  (await waiting).cancel();
  return { g, held };
}

/** `key` in snake_case. */
const snake = (key) => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** `value` as the core's JSON has it: keys in snake_case (both leave out what is absent). */
function asCore(value) {
  if (Array.isArray(value)) return value.map(asCore);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined).map(([k, v]) => [snake(k), asCore(v)]));
}

test('metrics() holds the snapshot and queues as snapshot() and queueMetrics() give them, and what was observed', async () => {
  const { g } = await busy();
  const m = g.metrics();
  assert.deepEqual(Object.keys(m).sort(), ['estimateErrors', 'queues', 'refusals', 'retryAmplification', 'snapshot']);
  assert.deepEqual(m.snapshot, g.snapshot());
  assert.deepEqual(m.queues, g.queueMetrics());
  const tokens = m.snapshot.scopes.find((s) => s.path === 'openai/org').limits[0];
  assert.deepEqual([tokens.effectiveAmount, tokens.reserved], [5000, 2500], 'AIMD halved it; the held permit');
  const batch = m.queues.classes.find((c) => c.klass === 'batch');
  assert.deepEqual([batch.admitted, batch.longestAdmittedWaitMs, batch.wait.count, batch.wait.sumMs], [1, 3000, 1, 3000]);
  const count = (dimension, decision) =>
    m.refusals.find((r) => r.dimension === dimension && r.gatewayDecision === decision).count;
  assert.equal(count('tokens', 'rejected_locally'), 1);
  assert.equal(count('tokens', 'admitted_then_provider_rejected'), 1);
  assert.equal(count('concurrency', 'rejected_locally'), 0);
  // Three admitted, one refused by the provider: 3 ÷ 2.
  assert.equal(m.retryAmplification, 1.5);
  const input = m.estimateErrors.find((e) => e.side === 'input');
  assert.deepEqual([input.scopes, input.samples], [['openai/org'], 1], 'the one settled; the held permit is not');
  // The core's histogram is exact to about ±1.6% of the ratio.
  for (const q of [input.p05, input.p50, input.p95]) assert.ok(Math.abs(q - 0.1) < 0.02, `10% under-estimated: ${q}`);
});

test("metricsJson() is the core's JSON: snake_case, with the figures metrics() gives", async () => {
  const { g } = await busy();
  const text = g.metricsJson();
  assert.equal(typeof text, 'string');
  const json = JSON.parse(text);
  const m = g.metrics();
  assert.deepEqual(json.snapshot, asCore(m.snapshot));
  assert.deepEqual(json.refusals, asCore(m.refusals));
  assert.deepEqual(json.estimate_errors, asCore(m.estimateErrors));
  assert.equal(json.retry_amplification, m.retryAmplification);
  // The queues, but for the histogram: the core's is counts and nanoseconds.
  assert.equal(json.queues.depth, m.queues.depth);
  // And `klass`, as everywhere in this package, is the core's `class`.
  const classes = m.queues.classes.map(({ wait, klass, ...rest }) => ({
    class: klass,
    ...asCore(rest),
    wait: { counts: wait.counts, sum_ns: wait.sumMs * 1e6 },
  }));
  assert.deepEqual(json.queues.classes, classes);
  assert.equal(json.queues.classes[0].class, 'batch');
  assert.equal(json.snapshot.scopes[0].limits[0].effective_amount, 5000);
});

test('llmgov top draws the file metricsJson() wrote: each scope in use / limit, refusals and retry amplification', async (t) => {
  const { g } = await busy();
  const dir = mkdtempSync(join(tmpdir(), 'llmgov-node-top-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'metrics.json');
  writeFileSync(file, g.metricsJson());
  const { snapshot } = g.metrics(); // the clock has not moved: what the file holds
  const out = execFileSync(llmgovBinary(), ['top', file, '--once'], { encoding: 'utf8', timeout: 30_000 });
  const lines = out.split('\n');
  // One refusal: the waiter's tries before it passed are not refusals.
  assert.match(lines[0], /admitted 3  rate limited 1 .* provider 429s 1 /, out);
  assert.ok(lines.includes('refused here: tokens 1  by the provider: tokens 1  retry amplification 1.50'), out);
  const tokens = lines.find((l) => l.startsWith('openai/org'));
  assert.ok(tokens, out);
  // In use of AIMD's 5000, the held permit's 2500 reserved.
  const inUse = snapshot.scopes.find((s) => s.path === 'openai/org').limits[0].inUse;
  assert.ok(inUse > 2500 && inUse < 5000, `${inUse}`);
  assert.match(tokens, new RegExp(`\\b${inUse} / 5000\\s+2500\\b.*\\(configured 10000\\)`), tokens);
  const slots = lines.find((l) => l.startsWith('tenants/acme'));
  assert.match(slots, /\b1 \/ 4\s+1\s.* 25%/, slots);
  assert.ok(lines.includes('queues: batch 0 waiting (oldest 0.0s)'), out);

  // What a camelCase object serializes to is not the core's JSON: top refuses it.
  writeFileSync(file, JSON.stringify(g.snapshot()));
  assert.throws(() => execFileSync(llmgovBinary(), ['top', file, '--once'], { encoding: 'utf8', stdio: 'pipe' }), (e) =>
    /not a governor snapshot/.test(e.stderr));
});
