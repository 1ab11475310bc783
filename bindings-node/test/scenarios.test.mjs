// Replays every conformance scenario in tests/scenarios/ (format:
// tests/scenarios/README.md; reference runner: core/tests/scenarios.rs)
// through the public Node API, on a manual clock.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import llmgov from '../dist/index.js';

const { Governor, LlmgovError, NeverFitsError, RateLimitedError } = llmgov;
const DIR = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'tests', 'scenarios');
const MIN_SCENARIOS = 15;

// The schema of each op: required and optional fields, and their types.
const num = (v) => typeof v === 'number' && Number.isInteger(v);
const nonNeg = (v) => num(v) && v >= 0;
const str = (v) => typeof v === 'string';
const obj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const SCHEMA = {
  advance: { required: { ms: nonNeg }, optional: {} },
  acquire: {
    required: { paths: (v) => Array.isArray(v) && v.every(str), expect: obj },
    optional: {
      permit: str,
      input_tokens: nonNeg,
      cached_input_tokens: nonNeg,
      max_output_tokens: nonNeg,
      expected_output_tokens: nonNeg,
    },
  },
  settle: {
    required: { permit: str },
    optional: { input_tokens: nonNeg, cached_input_tokens: nonNeg, output_tokens: nonNeg, expect: obj },
  },
  cancel: { required: { permit: str }, optional: { expect: obj } },
  add_output: { required: { permit: str, tokens: nonNeg }, optional: { expect: obj } },
  expect_limit: {
    required: { scope: str, dimension: str },
    optional: { limit: nonNeg, available: num, in_use: nonNeg, reserved: nonNeg, used: nonNeg, expired: nonNeg },
  },
  expect_counters: {
    required: {},
    optional: { admitted: nonNeg, rate_limited: nonNeg, never_fits: nonNeg, expired_permits: nonNeg },
  },
};
const EXPECT = {
  outcome: str,
  code: str,
  scope: str,
  dimension: str,
  retry_after_ms: (v) => v === null || nonNeg(v),
};

/** Throws if the step is malformed: a typo must never skip a check. */
function checkForm(step) {
  const schema = SCHEMA[step.op];
  if (!schema) throw new Error(`malformed step: unknown op ${JSON.stringify(step.op)}`);
  for (const [k, ok] of Object.entries(schema.required)) {
    if (!(k in step)) throw new Error(`malformed step: missing field \`${k}\``);
    if (!ok(step[k])) throw new Error(`malformed step: bad \`${k}\``);
  }
  for (const [k, v] of Object.entries(step)) {
    if (k === 'op' || k in schema.required) continue;
    const ok = schema.optional[k];
    if (!ok) throw new Error(`malformed step: unknown field \`${k}\``);
    if (!ok(v)) throw new Error(`malformed step: bad \`${k}\``);
  }
  if (step.expect !== undefined) {
    for (const [k, v] of Object.entries(step.expect)) {
      if (!EXPECT[k]) throw new Error(`malformed expect: unknown field \`${k}\``);
      if (!EXPECT[k](v)) throw new Error(`malformed expect: bad \`${k}\``);
    }
    if (!('outcome' in step.expect)) throw new Error('malformed expect: missing `outcome`');
    if (step.expect.outcome === 'error' && step.expect.code === undefined) {
      throw new Error('an expected error must give its code');
    }
  }
  if (step.op === 'acquire' && step.expect.outcome === 'admitted' && step.permit === undefined) {
    throw new Error('an acquire expected to be admitted must name its permit');
  }
}

/** A call's result in the scenario vocabulary. */
function outcome(call, success) {
  try {
    const value = call();
    return [{ outcome: success }, value];
  } catch (e) {
    if (e instanceof RateLimitedError) {
      return [{ outcome: 'rate_limited', scope: e.scope, dimension: e.dimension, retry_after_ms: e.retryAfterMs }];
    }
    if (e instanceof NeverFitsError) return [{ outcome: 'never_fits', scope: e.scope, dimension: e.dimension }];
    if (e instanceof LlmgovError) return [{ outcome: 'error', code: e.code }];
    throw e;
  }
}

/** Every field `expected` states, bar `selectors`, must equal `actual`'s. */
function covers(expected, actual, selectors = []) {
  for (const [k, v] of Object.entries(expected)) {
    if (selectors.includes(k)) continue;
    if (!(k in actual) || actual[k] !== v) {
      throw new Error(`expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
    }
  }
}

function limitOf(gov, step) {
  const snapshot = gov.snapshot();
  const scope = snapshot.scopes.find((s) => s.path === step.scope);
  if (!scope) throw new Error(`no scope \`${step.scope}\`; known: ${snapshot.scopes.map((s) => s.path)}`);
  const limit = step.limit === undefined
    ? scope.limits.find((l) => l.dimension === step.dimension)
    : scope.limits[step.limit]?.dimension === step.dimension ? scope.limits[step.limit] : undefined;
  if (!limit) throw new Error(`scope \`${step.scope}\` has no ${step.dimension} limit at ${step.limit}`);
  const actual = { available: limit.available, in_use: limit.inUse, reserved: limit.reserved, used: limit.used };
  if (limit.expired !== undefined) actual.expired = limit.expired;
  return actual;
}

function named(permits, name) {
  const permit = permits.get(name);
  if (!permit) throw new Error(`no admitted permit named \`${name}\``);
  return permit;
}

function runStep(gov, permits, step) {
  const expected = step.expect ?? { outcome: 'ok' };
  switch (step.op) {
    case 'advance':
      return gov.advance(step.ms);
    case 'acquire': {
      if (step.permit !== undefined && permits.has(step.permit)) throw new Error(`permit \`${step.permit}\` used twice`);
      const [actual, permit] = outcome(() => gov.tryAcquire({
        paths: step.paths,
        inputTokens: step.input_tokens ?? 0,
        cachedInputTokens: step.cached_input_tokens ?? 0,
        maxOutputTokens: step.max_output_tokens ?? 0,
        expectedOutputTokens: step.expected_output_tokens,
      }), 'admitted');
      if (permit && step.permit !== undefined) permits.set(step.permit, permit);
      return covers(expected, actual);
    }
    case 'settle': {
      const permit = named(permits, step.permit);
      const usage = {
        inputTokens: step.input_tokens ?? 0,
        cachedInputTokens: step.cached_input_tokens ?? 0,
        outputTokens: step.output_tokens ?? 0,
      };
      return covers(expected, outcome(() => permit.settle(usage), 'ok')[0]);
    }
    case 'cancel': {
      const permit = named(permits, step.permit);
      return covers(expected, outcome(() => permit.cancel(), 'ok')[0]);
    }
    case 'add_output': {
      const permit = named(permits, step.permit);
      return covers(expected, outcome(() => permit.addOutput(step.tokens), 'ok')[0]);
    }
    case 'expect_limit':
      return covers(step, limitOf(gov, step), ['op', 'scope', 'dimension', 'limit']);
    case 'expect_counters': {
      const s = gov.snapshot();
      const actual = {
        admitted: s.admitted,
        rate_limited: s.rateLimited,
        never_fits: s.neverFits,
        expired_permits: s.expiredPermits,
      };
      return covers(step, actual, ['op']);
    }
  }
}

/** Replays one file; throws at its first failing step. Returns its step count. */
function replay(file) {
  const scenario = JSON.parse(readFileSync(join(DIR, file), 'utf8'));
  const keys = Object.keys(scenario).sort().join(',');
  if (keys !== 'config,description,name,steps') throw new Error(`top-level fields ${keys}`);
  if (`${scenario.name}.json` !== file) throw new Error(`name \`${scenario.name}\` differs from the file name`);
  if (!scenario.description.trim()) throw new Error('description is empty');
  const gov = Governor.fromJson(scenario.config, { clock: 'manual' });
  const permits = new Map();
  scenario.steps.forEach((step, i) => {
    try {
      checkForm(step);
      runStep(gov, permits, step);
    } catch (e) {
      throw new Error(`tests/scenarios/${file}: steps[${i}] ${JSON.stringify(step)}: ${e.message}`);
    }
  });
  return scenario.steps.length;
}

const files = readdirSync(DIR).filter((f) => f.endsWith('.json')).sort();
let steps = 0;

for (const file of files) {
  test(`scenario ${file}`, () => {
    steps += replay(file);
  });
}

test(`at least ${MIN_SCENARIOS} scenarios replayed`, () => {
  console.log(`replayed ${files.length} scenarios (${steps} steps)`);
  assert.ok(files.length >= MIN_SCENARIOS, `found ${files.length} scenario files, expected at least ${MIN_SCENARIOS}`);
});
