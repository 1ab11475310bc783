// `gov.prometheus()`: the state in the Prometheus text format, per scope and
// dimension, with the counters, breakers and queues, on a manual clock.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import llmgov from '../dist/index.js';

const { Governor } = llmgov;

/** The value of the first sample whose line starts with `prefix`. */
function value(text, prefix) {
  const line = text.split('\n').find((l) => l.startsWith(prefix));
  assert.ok(line, `no \`${prefix}\` in\n${text}`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

test('limits, usage, counters, breakers and queues are exposed with their values', () => {
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
  const slots = '{scope="tenants/acme",dimension="concurrency",window_ms="none"}';
  assert.equal(value(text, `llmgov_utilisation${slots}`), 0.5);
  assert.equal(value(text, 'llmgov_admitted_total'), 2);
  assert.equal(value(text, 'llmgov_rate_limited_total'), 1);
  assert.equal(value(text, 'llmgov_provider_rejected_total'), 1);
  assert.equal(value(text, 'llmgov_breaker{scope="openai/org",state="closed"}'), 1);
  assert.match(text, /^# TYPE llmgov_limit gauge$/m);
  assert.match(text, /# EOF\n?$/);
});
