// Acquiring by model profile on a manual clock: the roomiest deployment is
// chosen (keys of one organisation share its pool), a refused deployment
// fails over, an open breaker is skipped, and the fallback chain is followed
// only where the request's class allows it; refusals are the mapped errors.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import llmgov from '../dist/index.js';

const { Governor, Permit, RoutedPermit, RateLimitedError, CircuitOpenError, InvalidRequestError, LlmgovError } = llmgov;

const limits = (rpm, tpm) => [
  { dimension: 'requests', amount: rpm, window: '1m' },
  { dimension: 'tokens', amount: tpm, window: '1m' },
];
const CONFIG = {
  adaptive: { breaker: { failures: 1, pauses: ['30s'] } },
  scopes: {
    // Two keys of one OpenAI organisation share its pool.
    'openai/org': { provider: true, limits: limits(100, 10000) },
    'openai/org/key-1': { provider: true, limits: limits(100, 10000) },
    'openai/org/key-2': { provider: true, limits: limits(100, 10000) },
    'azure/eastus': { provider: true, limits: limits(100, 8000) },
    'mini/org': { provider: true, limits: limits(100, 100000) },
    'tenants/*': { limits: [{ dimension: 'tokens', amount: 1000000, window: '1m' }] },
  },
  profiles: {
    'gpt-4o': {
      deployments: ['openai/org/key-1', 'openai/org/key-2', 'azure/eastus'],
      fallback: 'mini',
      fallback_allowed: { eval: false },
    },
    mini: { deployments: ['mini/org'] },
  },
};
const gov = () => Governor.fromJson(CONFIG, { clock: 'manual' });
const used = (g, path) =>
  g.snapshot().scopes.find((s) => s.path === path).limits.find((l) => l.dimension === 'tokens').inUse;

test('the roomiest deployment is chosen, and keys share their organisation pool', () => {
  const g = gov();
  const ask = (inputTokens) => g.tryAcquireProfile({ profile: 'gpt-4o', consumer: ['tenants/acme'], inputTokens });
  const first = ask(6000);
  assert.ok(first instanceof RoutedPermit && first instanceof Permit);
  assert.deepEqual([first.profile, first.deployment, first.fellBack], ['gpt-4o', 'openai/org/key-1', false]);
  // The org pool is 60% full, so key-2 (same org) has 40% room; Azure has all of its own.
  const second = ask(1000);
  assert.equal(second.deployment, 'azure/eastus');
  assert.equal(ask(1000).deployment, 'azure/eastus', "azure 87.5% free beats the org's 40%");
  // The consumer's scope is charged on every deployment.
  assert.equal(used(g, 'tenants/acme'), 8000);
  assert.equal(used(g, 'azure/eastus'), 2000);
  // The permit is an ordinary one on the chosen deployment's route.
  second.settle({ inputTokens: 500 });
  assert.equal(second.state, 'settled');
  assert.equal(used(g, 'azure/eastus'), 1500);
  assert.equal(second.route, g.route(['tenants/acme', 'azure/eastus']));
});

test('a refused deployment fails over to the next', () => {
  const g = gov();
  const profile = g.profile('gpt-4o', ['tenants/acme']);
  assert.equal(g.profile('gpt-4o', ['tenants/acme']), profile, 'resolved once');
  assert.equal(g.tryAcquireProfile({ profile, inputTokens: 7000 }).deployment, 'openai/org/key-1');
  assert.equal(g.tryAcquireProfile({ profile, inputTokens: 7000 }).deployment, 'azure/eastus', 'the org pool cannot take 7000 more');
});

test('an open breaker is skipped; with every breaker open, a class that may not fall back gets CircuitOpenError', () => {
  const g = gov();
  const profile = g.profile('gpt-4o');
  const probe = g.tryAcquireProfile({ profile });
  assert.equal(probe.deployment, 'openai/org/key-1');
  probe.report(503, {}, '');
  probe.cancel();
  const onAzure = g.tryAcquireProfile({ profile });
  assert.equal(onAzure.deployment, 'azure/eastus', "key-1's breaker (and the org's) is open");
  onAzure.report(503, {}, '');
  onAzure.cancel();
  assert.throws(() => g.tryAcquireProfile({ profile, klass: 'eval' }), (e) => {
    assert.ok(e instanceof CircuitOpenError && e instanceof LlmgovError);
    assert.equal(e.code, 'circuit_open');
    assert.ok(['openai/org', 'openai/org/key-1'].includes(e.scope), e.scope);
    assert.equal(e.retryAfterMs, 30_000);
    return true;
  });
  const fellBack = g.tryAcquireProfile({ profile });
  assert.deepEqual([fellBack.profile, fellBack.deployment, fellBack.fellBack], ['mini', 'mini/org', true]);
  g.advance(30_000);
  assert.equal(g.tryAcquireProfile({ profile }).deployment, 'openai/org/key-1', 'the pause is over: key-1 probes again');
});

test('fallback follows the chain only where the class allows it, else refuses with the reason', () => {
  const g = gov();
  const big = { profile: 'gpt-4o', consumer: ['tenants/acme'], inputTokens: 9000 };
  assert.equal(g.tryAcquireProfile(big).deployment, 'openai/org/key-1');
  assert.throws(() => g.tryAcquireProfile({ ...big, klass: 'eval' }), (e) => {
    assert.ok(e instanceof RateLimitedError);
    assert.equal(e.code, 'rate_limited');
    assert.equal(e.scope, 'openai/org', 'the first profile’s refusal: its roomiest deployment that could admit it later');
    assert.equal(e.dimension, 'tokens');
    assert.match(e.message, /rate limited on scope `openai\/org`, dimension tokens; retry after \d+ ms/);
    return true;
  });
  const batch = g.tryAcquireProfile({ ...big, klass: 'batch' });
  assert.deepEqual([batch.profile, batch.deployment, batch.fellBack], ['mini', 'mini/org', true]);
  assert.equal(used(g, 'mini/org'), 9000);
});

test('bad profile requests name the field and the value', () => {
  const g = gov();
  const invalid = (request, field) =>
    assert.throws(() => g.tryAcquireProfile(request), (e) => e instanceof InvalidRequestError && e.field === field, field);
  invalid({ profile: 'nope' }, 'profile');
  assert.throws(() => g.tryAcquireProfile({ profile: 'nope' }), /known: gpt-4o, mini/);
  invalid({ profile: 12345 }, 'profile');
  invalid({ profile: g.profile('gpt-4o'), consumer: ['tenants/acme'] }, 'consumer');
  invalid({ profile: 'gpt-4o', inputTokens: -1 }, 'inputTokens');
  invalid({ profile: 'gpt-4o', maxOutputTokens: 1.5 }, 'maxOutputTokens');
  invalid({ profile: 'gpt-4o', consumer: 'tenants/acme' }, 'consumer');
  invalid(null, 'request');
  assert.equal(g.livePermits(), 0, 'nothing was reserved');
});
