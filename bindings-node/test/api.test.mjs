// The public API on a manual clock: construction, routes, admission,
// reconciliation, expiry, feedback, counting and the error classes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import llmgov from '../dist/index.js';

const {
  Governor, LlmgovError, RateLimitedError, NeverFitsError, PermitFinishedError, PermitExpiredError,
  UnknownPresetError, RetryPolicy, classifyResponse, countTokens, countChatTokens, estimateTokens,
} = llmgov;

const TOML = `
permit_ttl = "16s"
[scopes."openai/org/gpt-4o"]
provider = true
limits = [
  { dimension = "requests", amount = 600, window = "1m" },
  { dimension = "tokens", amount = 6000, window = "1m" },
]
[scopes."tenants/*"]
limits = [{ dimension = "concurrency", amount = 2 }]
`;
const PATHS = ['tenants/acme', 'openai/org/gpt-4o'];

const gov = () => Governor.fromToml(TOML, { clock: 'manual' });
const limit = (g, path, dimension) =>
  g.snapshot().scopes.find((s) => s.path === path).limits.find((l) => l.dimension === dimension);

test('constructors: TOML text or file, JSON text or object, presets', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgov-'));
  const file = join(dir, 'limits.toml');
  writeFileSync(file, TOML);
  for (const g of [gov(), Governor.fromToml(file), Governor.fromJson({ scopes: { a: { limits: [{ dimension: 'requests', amount: 1, window: '1s' }] } } })]) {
    assert.ok(g.snapshot().scopes.length >= 1);
  }
  const preset = Governor.fromPreset('openai-gpt-4o-tier1');
  assert.ok(preset.snapshot().scopes.length >= 1);
  assert.throws(() => Governor.fromPreset('nope'), (e) => e instanceof UnknownPresetError && e.preset === 'nope' && e.known.includes('openai-gpt-4o-tier1'));
});

test('routes are numbers, resolved once and equal for equal scope sets', () => {
  const g = gov();
  const route = g.route(PATHS);
  assert.equal(typeof route, 'number');
  assert.equal(g.route(PATHS), route);
  assert.equal(g.route([...PATHS].reverse()), route);
  assert.notEqual(g.route(['tenants/other', 'openai/org/gpt-4o']), route);
});

test('admission is all or nothing; refusals carry scope, dimension and retry time', () => {
  const g = gov();
  const route = g.route(PATHS);
  const p = g.tryAcquire({ route, inputTokens: 5000, maxOutputTokens: 500 });
  assert.equal(p.state, 'pending');
  assert.deepEqual(p.info().inputTokens, 5000);
  assert.throws(() => g.tryAcquire({ route, inputTokens: 1000 }), (e) => {
    assert.ok(e instanceof RateLimitedError && e instanceof LlmgovError && e instanceof Error);
    assert.equal(e.code, 'rate_limited');
    assert.equal(e.scope, 'openai/org/gpt-4o');
    assert.equal(e.dimension, 'tokens');
    assert.equal(e.retryAfterMs, 5000); // 500 tokens short at 100 a second
    assert.equal(e.gatewayDecision, 'rejected_locally');
    return true;
  });
  assert.throws(() => g.tryAcquire({ route, inputTokens: 7000 }), (e) => e instanceof NeverFitsError && e.cost === 7000 && e.burst === 6000);
  // Nothing was taken by the refusals: only the first request is in flight.
  assert.equal(limit(g, 'tenants/acme', 'concurrency').inUse, 1);
  assert.equal(limit(g, 'openai/org/gpt-4o', 'requests').inUse, 1);
});

const pick = ({ inUse, reserved, used }) => ({ inUse, reserved, used });

test('settle refunds, accepts SDK usage objects, and reconciles once', () => {
  const g = gov();
  const route = g.route(PATHS);
  const a = g.tryAcquire({ route, inputTokens: 1000, maxOutputTokens: 1000 });
  assert.deepEqual(pick(limit(g, 'openai/org/gpt-4o', 'tokens')), { inUse: 2000, reserved: 2000, used: 0 });
  a.settle({ prompt_tokens: 900, completion_tokens: 100, prompt_tokens_details: { cached_tokens: 0 } });
  assert.equal(a.state, 'settled');
  assert.deepEqual(pick(limit(g, 'openai/org/gpt-4o', 'tokens')), { inUse: 1000, reserved: 0, used: 1000 });
  assert.throws(() => a.settle({ inputTokens: 1 }), (e) => e instanceof PermitFinishedError && e.state === 'settled');
  assert.throws(() => a.cancel(), (e) => e instanceof PermitFinishedError);
  const b = g.tryAcquire({ route, inputTokens: 100 });
  // Anthropic counts cache reads apart; llmgov's input includes them.
  b.settle({ input_tokens: 50, output_tokens: 10, cache_read_input_tokens: 40, cache_creation_input_tokens: 0 });
  assert.equal(limit(g, 'openai/org/gpt-4o', 'tokens').inUse, 1100);
  const c = g.tryAcquire({ route, inputTokens: 100 });
  c.cancel();
  assert.equal(c.state, 'cancelled');
  assert.equal(limit(g, 'openai/org/gpt-4o', 'tokens').inUse, 1100);
  assert.equal(g.livePermits(), 0);
});

test('streamed output beyond the reservation is charged as it arrives', () => {
  const g = gov();
  const p = g.tryAcquire({ paths: PATHS, inputTokens: 100, maxOutputTokens: 50 });
  p.addOutput(40);
  assert.equal(limit(g, 'openai/org/gpt-4o', 'tokens').inUse, 150);
  p.addOutput(30);
  assert.equal(limit(g, 'openai/org/gpt-4o', 'tokens').inUse, 170);
  p.settle({ inputTokens: 100, outputTokens: 70 });
  assert.equal(limit(g, 'openai/org/gpt-4o', 'tokens').inUse, 170);
});

test('a permit left alone expires after the TTL: charged, concurrency freed, permit_expired ever after', () => {
  const g = gov();
  const p = g.tryAcquire({ paths: PATHS, inputTokens: 100 });
  g.advance(17_000);
  assert.equal(limit(g, 'tenants/acme', 'concurrency').inUse, 0);
  assert.throws(() => p.settle({ inputTokens: 100 }), (e) => e instanceof PermitExpiredError && e.code === 'permit_expired');
  assert.equal(p.state, 'expired');
  assert.throws(() => p.cancel(), PermitExpiredError);
  assert.throws(() => p.addOutput(1), PermitExpiredError);
  assert.equal(g.snapshot().expiredPermits, 1);
});

test('forgotten permits are swept once expired, so the permit table stays bounded', () => {
  const g = Governor.fromJson({ permit_ttl: '16s', scopes: { a: { limits: [{ dimension: 'requests', amount: 100000, window: '1s' }] } } }, { clock: 'manual' });
  const route = g.route(['a']);
  for (let i = 0; i < 3000; i++) g.tryAcquire({ route });
  assert.equal(g.livePermits(), 3000);
  g.advance(17_000);
  // The table sweeps when it would grow past twice what was live at the
  // last sweep (4096 here): the 3000 expired permits go then.
  for (let i = 0; i < 1200; i++) g.tryAcquire({ route });
  assert.equal(g.livePermits(), 1200);
  assert.equal(g.snapshot().expiredPermits, 3000);
});

test('input can be given as text or messages, counted for the model', () => {
  const g = gov();
  const text = 'tiktoken is great!';
  const p = g.tryAcquire({ paths: PATHS, text, model: 'gpt-4o' });
  assert.equal(p.info().inputTokens, countTokens(text, 'gpt-4o'));
  const messages = [{ role: 'user', content: 'Hello!' }];
  const q = g.tryAcquire({ paths: ['tenants/b', 'openai/org/gpt-4o'], messages, model: 'gpt-4o' });
  assert.equal(q.info().inputTokens, 9);
});

test('traffic classes and expected output', () => {
  const g = Governor.fromJson({
    scopes: { b: { limits: [{ dimension: 'tokens', amount: 100000, window: '1m', reserve_output: 'expected' }] } },
  }, { clock: 'manual' });
  const p = g.tryAcquire({ paths: ['b'], inputTokens: 10, maxOutputTokens: 1000, expectedOutputTokens: 100, klass: 'batch' });
  assert.equal(p.info().expectedOutputTokens, 100);
  assert.equal(limit(g, 'b', 'tokens').inUse, 110);
});

test('report feeds a provider 429 back: the bucket it names waits out the retry-after', async () => {
  const g = gov();
  const p = g.tryAcquire({ paths: PATHS, inputTokens: 10 });
  const body = { error: { message: 'Rate limit reached', type: 'tokens', code: 'rate_limit_exceeded' } };
  const c = p.report(429, { 'retry-after': '20', 'x-ratelimit-remaining-tokens': '0' }, body);
  assert.equal(c.kind, 'rate_limited');
  assert.equal(c.dimension, 'tokens');
  assert.equal(c.retryAfterMs, 20000);
  assert.equal(g.snapshot().admittedThenProviderRejected, 1);
  assert.throws(() => g.tryAcquire({ paths: PATHS, inputTokens: 10 }), RateLimitedError);
  // An openai-node APIError: status, headers, and the parsed error body.
  const apiError = Object.assign(new Error('429'), { status: 429, headers: new Headers({ 'retry-after': '1' }), error: body.error });
  assert.equal(p.report(apiError).retryAfterMs, 1000);
  // A fetch Response: its body is read from a clone, so a Promise comes back.
  const response = new Response(JSON.stringify(body), { status: 429, headers: { 'retry-after-ms': '1500' } });
  const fromResponse = await p.report(response);
  assert.equal(fromResponse.retryAfterMs, 1500);
  assert.equal(await response.text(), JSON.stringify(body), 'the caller can still read the body');
  p.cancel();
});

test('classifyResponse reads every shape of headers', () => {
  const headers = [['retry-after', '2'], ['x-ratelimit-remaining-requests', '0']];
  for (const h of [headers, Object.fromEntries(headers), new Headers(headers)]) {
    const c = classifyResponse(429, h, '', { provider: 'openai' });
    assert.equal(c.retryAfterMs, 2000);
    assert.equal(c.remaining.requests, 0);
    assert.equal(c.provider, 'openai');
  }
  const ok = classifyResponse(200, { 'anthropic-ratelimit-tokens-remaining': '100' });
  assert.equal(ok.limited, false);
  assert.equal(ok.kind, 'none');
  assert.equal(ok.provider, 'anthropic');
  const quota = classifyResponse(429, {}, { error: { code: 'insufficient_quota', type: 'insufficient_quota' } });
  assert.equal(quota.kind, 'quota_exhausted');
  assert.equal(quota.retryable, false);
  // The status that counted, as Python's classification gives it: an
  // OpenRouter error inside a 200 counts as its code.
  assert.equal(quota.status, 429);
  assert.equal(classifyResponse(200, {}, { error: { code: 502, message: 'upstream', metadata: { provider_name: 'x' } } }).status, 502);
});

test('retry advice: retry-after or backoff, attempts, deadline', () => {
  const policy = new RetryPolicy({ maxRetries: 2, baseDelayMs: 100, maxDelayMs: 1000 });
  policy.recordRequest();
  const first = policy.advise({ attempt: 0, status: 429, headers: { 'retry-after': '3' } });
  assert.equal(first.advice, 'retry_after');
  assert.equal(first.delayMs, 3000);
  assert.equal(first.reason.code, 'rate_limited');
  assert.equal(policy.advise({ attempt: 2, status: 503 }).reason.code, 'attempts_exhausted');
  assert.equal(policy.advise({ attempt: 0, status: 400 }).advice, 'give_up');
  assert.equal(policy.advise({ attempt: 0, status: 429, headers: { 'retry-after': '3' }, deadlineInMs: 1000 }).reason.code, 'deadline_exceeded');
  const connection = policy.advise({ attempt: 1 });
  assert.equal(connection.reason.code, 'connection_error');
  assert.ok(connection.delayMs <= 200);
});

test('token counting: exact, chat framing, the fast estimate', () => {
  assert.equal(countTokens('tiktoken is great!'), 6);
  assert.equal(countTokens('tiktoken is great!', 'gpt-4'), 6);
  assert.equal(countChatTokens([{ role: 'user', content: 'Hello!' }], 'gpt-4o'), 9);
  const withTool = countChatTokens([{ role: 'user', content: 'Hello!' }], 'gpt-4o', [
    { type: 'function', function: { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
  ]);
  assert.ok(withTool > 9);
  const text = 'The quick brown fox jumps over the lazy dog. '.repeat(20);
  const estimate = estimateTokens(text);
  assert.ok(Math.abs(estimate - countTokens(text)) / countTokens(text) < 0.3);
});

test('advance needs a manual clock', () => {
  const g = Governor.fromToml(TOML);
  assert.throws(() => g.advance(1), (e) => e.code === 'invalid_request' && e.field === 'clock');
  const m = gov();
  m.advance(1500);
  assert.equal(m.nowMs(), 1500);
});
