// planCapacity: the core's capacity planner (what `llmgov plan` prints and
// Python's `plan_capacity` returns), with camelCase options. The cases
// mirror core/src/plan.rs and bindings-python/tests/test_plan.py, so the
// languages agree; bad input is an InvalidRequestError naming the option.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import llmgov from '../dist/index.js';
import { llmgovBinary } from './helpers/mock-server.mjs';

const { planCapacity, InvalidRequestError, LlmgovError } = llmgov;

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const SEED = { rpm: 60, tpm: 100_000, avgInput: 1500, avgOutput: 500 };
const close = (actual, expected) => assert.ok(Math.abs(actual - expected) < 1e-9, `${actual} ≠ ${expected}`);

test("the seed batch case (core/src/plan.rs's doc example): tpm binds at 50 a minute", () => {
  const plan = planCapacity({ ...SEED, utilisation: 1 });
  assert.deepEqual(plan, {
    ceilings: [{ limit: 'rpm', rpm: 60 }, { limit: 'tpm', rpm: 50 }],
    binding: 'tpm',
    sustainableRpm: 50,
    sustainableRpmReservingP95: null,
  });
  // The default utilisation is 0.9, as in the core, the command and Python.
  close(planCapacity(SEED).sustainableRpm, 45);
});

test('concurrency binds long requests: concurrency × 60 ÷ latency', () => {
  const full = planCapacity({ ...SEED, concurrency: 10, latency: 30, utilisation: 1 });
  assert.equal(full.binding, 'concurrency');
  close(full.sustainableRpm, 20);
  assert.deepEqual(full.ceilings.map((c) => c.limit), ['rpm', 'tpm', 'concurrency']);
  // Python's case: 20 a minute at the default 90%.
  const plan = planCapacity({ ...SEED, concurrency: 10, latency: 30 });
  assert.equal(plan.binding, 'concurrency');
  close(plan.sustainableRpm, 18);
  // The default latency is 5 s: 10 in flight allow 120 a minute, so tpm binds.
  assert.equal(planCapacity({ ...SEED, concurrency: 10 }).binding, 'tpm');
});

test('p95 reservations lower the rate, and utilisation scales it', () => {
  const held = planCapacity({ ...SEED, p95Output: 1500 });
  close(held.sustainableRpm, 45);
  close(held.sustainableRpmReservingP95, 30);
  const input = planCapacity({ ...SEED, inputTpm: 30_000, p95Input: 3000, utilisation: 1 });
  assert.equal(input.binding, 'input_tpm');
  close(input.sustainableRpm, 20);
  close(input.sustainableRpmReservingP95, 10);
});

test('a limit on tokens the requests do not use allows any rate: Infinity', () => {
  const plan = planCapacity({ rpm: 60, outputTpm: 1000, avgInput: 100, avgOutput: 0 });
  assert.deepEqual(plan.ceilings, [{ limit: 'rpm', rpm: 60 }, { limit: 'output_tpm', rpm: Infinity }]);
  assert.equal(plan.binding, 'rpm');
  close(plan.sustainableRpm, 54);
  // Undefined options are absent options.
  assert.deepEqual(planCapacity({ rpm: 60, tpm: undefined, avgInput: 1, avgOutput: 1 }).ceilings, [{ limit: 'rpm', rpm: 60 }]);
});

const FLAGS = {
  rpm: '--rpm', tpm: '--tpm', inputTpm: '--input-tpm', outputTpm: '--output-tpm', concurrency: '--concurrency',
  avgInput: '--avg-input', avgOutput: '--avg-output', p95Input: '--p95-input', p95Output: '--p95-output',
  latency: '--latency', utilisation: '--utilisation',
};

/** `llmgov plan --json` for the same options, camelCased (an unbounded ceiling, whose `rpm` the JSON leaves out, is Infinity). */
function printedPlan(options) {
  const args = Object.entries(options).flatMap(([name, value]) => [FLAGS[name], String(value)]);
  const printed = JSON.parse(execFileSync(llmgovBinary(), ['plan', '--json', ...args], { encoding: 'utf8' }));
  return {
    ceilings: printed.ceilings.map(({ limit, rpm }) => ({ limit, rpm: rpm ?? Infinity })),
    binding: printed.binding,
    sustainableRpm: printed.sustainable_rpm,
    sustainableRpmReservingP95: printed.sustainable_rpm_reserving_p95,
  };
}

test('it agrees with `llmgov plan --json`', () => {
  const cases = [
    { rpm: 500, tpm: 30000, avgInput: 1200, avgOutput: 300, p95Output: 900 }, // Python's case
    { ...SEED, utilisation: 1 },
    { ...SEED, concurrency: 10, latency: 30 },
    { rpm: 60, inputTpm: 40000, outputTpm: 1000, avgInput: 100, avgOutput: 0, p95Input: 400, utilisation: 0.5 },
  ];
  for (const options of cases) assert.deepEqual(planCapacity(options), printedPlan(options), JSON.stringify(options));
});

/** An InvalidRequestError whose `field`, `value` and message name the option and the value. */
function invalid(field, value, reason) {
  return (e) => {
    assert.ok(e instanceof InvalidRequestError && e instanceof LlmgovError, `${e?.name}: ${e?.message}`);
    assert.equal(e.code, 'invalid_request');
    assert.equal(e.field, field);
    assert.equal(e.value, value);
    assert.ok(e.message.includes(`\`${field}\` = \`${value}\``), e.message);
    if (reason) assert.match(e.reason, reason);
    return true;
  };
}

test('bad values, found by the core, name the option as written and the value', () => {
  const cases = [
    [{ rpm: -1 }, 'rpm', '-1', /positive/],
    [{ tpm: 0 }, 'tpm', '0', /positive/],
    [{ inputTpm: -3 }, 'inputTpm', '-3', /positive/],
    [{ outputTpm: 0 }, 'outputTpm', '0', /positive/],
    [{ concurrency: -10 }, 'concurrency', '-10', /positive/],
    [{ rpm: 60, p95Output: 0 }, 'p95Output', '0', /positive/],
    [{ rpm: 60, concurrency: 4, latency: 0 }, 'latency', '0', /positive/],
    [{ rpm: 60, p95Output: 50 }, 'p95Output/avgOutput', '50/100', /below the average/],
    [{ rpm: 60, utilisation: 1.5 }, 'utilisation', '1.5', /\(0, 1\]/],
    [{ rpm: 60, utilisation: 0 }, 'utilisation', '0', /\(0, 1\]/],
    [{ rpm: 60, avgInput: -5 }, 'avgInput', '-5', /non-negative/],
    [{}, 'rpm/tpm/inputTpm/outputTpm/concurrency', 'none', /at least one limit/],
  ];
  for (const [options, field, value, reason] of cases) {
    assert.throws(() => planCapacity({ avgInput: 100, avgOutput: 100, ...options }), invalid(field, value, reason));
  }
});

test('wrong shapes, found by the wrapper: missing averages, wrong types, unknown options', () => {
  const base = { rpm: 60, avgInput: 100, avgOutput: 100 };
  const cases = [
    [{ rpm: 60, avgOutput: 100 }, 'avgInput', 'undefined', /required/],
    [{ rpm: 60, avgInput: 100 }, 'avgOutput', 'undefined', /required/],
    [{ ...base, rpm: '60' }, 'rpm', '"60"', /must be a number/],
    [{ ...base, rpm: true }, 'rpm', 'true', /must be a number/],
    [{ ...base, tpm: null }, 'tpm', 'null', /must be a number/],
    [{ ...base, avgInput: 100n }, 'avgInput', '100', /must be a number/],
    [{ ...base, latency: NaN }, 'latency', 'NaN', /finite/],
    [{ ...base, rpm: Infinity }, 'rpm', 'Infinity', /finite/],
    [{ ...base, input_tpm: 5 }, 'input_tpm', '5', /did you mean inputTpm/],
    [{ ...base, tmp: 5000 }, 'tmp', '5000', /not an option of planCapacity; known: avgInput/],
  ];
  for (const [options, field, value, reason] of cases) {
    assert.throws(() => planCapacity(options), invalid(field, value, reason));
  }
  for (const options of [undefined, null, 60, 'rpm=60', [60]]) {
    assert.throws(() => planCapacity(options), (e) => e instanceof InvalidRequestError && e.field === 'options');
  }
});

test("the README's planning example runs", () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const section = readme.split('## Capacity planning')[1] ?? '';
  const block = /```js\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(block, 'README.md has a capacity planning example');
  // Inside the package, so that `import 'llmgov'` resolves to it.
  const file = join(root, 'examples', '.readme-plan.mjs');
  writeFileSync(file, block);
  try {
    const out = execFileSync(process.execPath, [file], { cwd: root, encoding: 'utf8', timeout: 60_000 });
    assert.deepEqual(out.trim().split('\n'), [
      '50.0 requests/min, tpm binds',
      '18.0 requests/min, concurrency binds',
      '45.0 requests/min, 30.0 while holding the p95',
    ]);
  } finally {
    rmSync(file);
  }
});
