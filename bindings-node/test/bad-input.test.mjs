// Bad input gets a clear error naming the field and the value, never a
// crash, never a lost reservation.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import llmgov from '../dist/index.js';

const { Governor, InvalidConfigError, InvalidPathError, InvalidRequestError, RedisGovernor, UnknownScopeError, RetryPolicy, classifyResponse, countChatTokens, countTokens, estimateTokens, governedFetch } = llmgov;

const CONFIG = { scopes: { 'openai/gpt-4o': { limits: [{ dimension: 'tokens', amount: 100000, window: '1m' }, { dimension: 'concurrency', amount: 10 }] } } };
const gov = () => Governor.fromJson(CONFIG, { clock: 'manual' });
const tokensInUse = (g) => g.snapshot().scopes[0].limits[0].inUse;

const BAD_NUMBERS = [
  [-1, '-1', 'must not be negative'],
  [NaN, 'NaN', 'must be a number, not NaN'],
  [1.5, '1.5', 'must be a whole number'],
  [2 ** 53, '9007199254740992', 'must be below 2^53'],
  [Infinity, 'Infinity', 'must be below 2^53'],
];
const WRONG_TYPES = ['12', null, {}, 12n];

function invalid(field, value) {
  return (e) => {
    assert.ok(e instanceof InvalidRequestError, `${e?.name}: ${e?.message}`);
    assert.equal(e.code, 'invalid_request');
    assert.equal(e.field, field);
    if (value !== undefined) assert.equal(e.value, value);
    assert.ok(e.message.includes(`\`${field}\``), e.message);
    return true;
  };
}

test('acquire: every count is checked, and a refused request takes nothing', () => {
  const g = gov();
  for (const field of ['inputTokens', 'cachedInputTokens', 'maxOutputTokens', 'expectedOutputTokens']) {
    for (const [value, shown, reason] of BAD_NUMBERS) {
      assert.throws(() => g.tryAcquire({ paths: ['openai/gpt-4o'], inputTokens: 10, [field]: value }), (e) => {
        invalid(field, shown)(e);
        assert.ok(e.reason.startsWith(reason), e.reason);
        return true;
      });
    }
    for (const value of WRONG_TYPES) {
      assert.throws(() => g.tryAcquire({ paths: ['openai/gpt-4o'], [field]: value }), invalid(field));
    }
  }
  assert.throws(() => g.tryAcquire({ paths: ['openai/gpt-4o'], inputTokens: 5, cachedInputTokens: 6 }), (e) => e.code === 'invalid_request');
  assert.equal(tokensInUse(g), 0);
  assert.equal(g.snapshot().admitted, 0);
  assert.equal(g.livePermits(), 0);
});

test('settle, addOutput and advance: bad numbers leave the permit pending and usable', () => {
  const g = gov();
  const permit = g.tryAcquire({ paths: ['openai/gpt-4o'], inputTokens: 100, maxOutputTokens: 100 });
  for (const field of ['inputTokens', 'outputTokens', 'cachedInputTokens']) {
    for (const [value, shown] of BAD_NUMBERS) {
      assert.throws(() => permit.settle({ inputTokens: 1, outputTokens: 1, [field]: value }), invalid(field, shown));
    }
    assert.throws(() => permit.settle({ inputTokens: 1, outputTokens: 1, [field]: '3' }), invalid(field));
  }
  for (const [value, shown] of BAD_NUMBERS) assert.throws(() => permit.addOutput(value), invalid('tokens', shown));
  assert.throws(() => permit.settle(null), invalid('usage'));
  assert.throws(() => permit.settle({ prompt_tokens: -5, completion_tokens: 1 }), invalid('inputTokens', '-5'));
  assert.equal(permit.state, 'pending');
  assert.equal(tokensInUse(g), 200);
  permit.settle({ inputTokens: 100, outputTokens: 10 });
  assert.equal(tokensInUse(g), 110);
  assert.throws(() => g.advance(-1), invalid('ms', '-1'));
  assert.throws(() => g.advance('1'), invalid('ms'));
});

test('paths and routes: wrong types, malformed and unknown paths', () => {
  const g = gov();
  assert.throws(() => g.tryAcquire({ paths: 'openai/gpt-4o' }), invalid('paths'));
  assert.throws(() => g.tryAcquire({ paths: [1] }), invalid('paths'));
  assert.throws(() => g.tryAcquire({ paths: [] }), (e) => e.code === 'invalid_request');
  assert.throws(() => g.tryAcquire({}), invalid('paths'));
  assert.throws(() => g.tryAcquire(null), invalid('request'));
  assert.throws(() => g.tryAcquire({ paths: ['openai//gpt-4o'] }), (e) => e instanceof InvalidPathError && e.path === 'openai//gpt-4o');
  assert.throws(() => g.tryAcquire({ paths: ['anthropic/claude'] }), (e) => e instanceof UnknownScopeError && e.path === 'anthropic/claude');
  assert.throws(() => g.tryAcquire({ route: 99 }), invalid('route', '99'));
  assert.throws(() => g.tryAcquire({ route: -1 }), invalid('route', '-1'));
  assert.throws(() => g.tryAcquire({ route: '0' }), invalid('route'));
  assert.throws(() => g.tryAcquire({ paths: ['openai/gpt-4o'], klass: 7 }), invalid('klass'));
});

test('configs: a bad field is named with its value', () => {
  assert.throws(() => Governor.fromToml('[scopes.a]\nlimits = [{ dimension = "tokens", amount = 0, window = "1m" }]'), (e) => {
    assert.ok(e instanceof InvalidConfigError);
    assert.equal(e.code, 'invalid_config');
    assert.equal(e.field, 'scopes.a.limits[0].amount');
    assert.equal(e.value, '0');
    return true;
  });
  assert.throws(() => Governor.fromJson('{"scopes": {"a": {"limits": [{"dimension": "tokenz", "amount": 1, "window": "1m"}]}}}'), InvalidConfigError);
  assert.throws(() => Governor.fromJson('{not json'), InvalidConfigError);
  assert.throws(() => Governor.fromToml('[scopes.a]\nlimitz = []'), InvalidConfigError);
  assert.throws(() => Governor.fromToml(42), invalid('toml'));
  assert.throws(() => Governor.fromToml('[scopes.a]', { clock: 'sundial' }), invalid('clock'));
  assert.throws(() => new RetryPolicy({ budgetRatio: 2 }), (e) => e instanceof InvalidConfigError && e.field === 'retry.budget.ratio');
  assert.throws(() => new RetryPolicy({ baseDelayMs: -1 }), invalid('baseDelayMs', '-1'));
});

test('feedback and counting: bad statuses, headers and messages', () => {
  assert.throws(() => classifyResponse(1000), invalid('status', '1000'));
  assert.throws(() => classifyResponse('429'), invalid('status'));
  assert.throws(() => classifyResponse(429, [['only-a-name']]), invalid('headers'));
  assert.throws(() => classifyResponse(429, {}, '', { provider: 'acme' }), invalid('provider', 'acme'));
  assert.throws(() => countTokens(5), invalid('text'));
  assert.throws(() => countChatTokens('hi', 'gpt-4o'), invalid('messages'));
  // Garbage bodies and headers are read, not crashed on.
  const c = classifyResponse(429, { 'retry-after': 'soon', 'x-ratelimit-reset-tokens': '∞' }, '\u0000{{{');
  assert.equal(c.kind, 'rate_limited');
  assert.equal(countChatTokens([{ role: 'user', content: [{ type: 'weird' }] }, { no: 'role' }], 'gpt-4o') > 0, true);
  const policy = new RetryPolicy();
  assert.throws(() => policy.advise({ attempt: -1 }), invalid('attempt'));
});

test('settle: an object that is not a usage is refused, not settled as zero tokens', () => {
  const g = gov();
  const permit = g.tryAcquire({ paths: ['openai/gpt-4o'], inputTokens: 100, maxOutputTokens: 100 });
  const notUsage = (e) => {
    invalid('usage')(e);
    assert.match(e.reason, /is not a usage: it has neither `prompt_tokens` \(OpenAI\) nor `input_tokens`/);
    return true;
  };
  // ({ outputTokens: 5 } is one: it keeps the input estimate, see permit.test.mjs.)
  for (const usage of [{}, { input_token: 100, output_token: 50 }, { completion_tokens: 5 }, { prompt_tokens: null }]) {
    assert.throws(() => permit.settle(usage), notUsage);
  }
  assert.throws(() => permit.settle({ input_token: 100, output_token: 50 }), (e) => e.value === '{"input_token":100,"output_token":50}');
  assert.equal(permit.state, 'pending');
  assert.equal(tokensInUse(g), 200);
  permit.settle({ input_tokens: 80, output_tokens: 5 });
  assert.equal(tokensInUse(g), 85);
});

test('governedFetch: an odd provider answer never fails a served call nor leaves its permit pending', async () => {
  const g = gov();
  const url = 'https://api.openai.com/v1/chat/completions';
  const body = JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hello there' }], max_tokens: 50 });
  const json = (answer) => async () => new Response(JSON.stringify(answer), { status: 200, headers: { 'content-type': 'application/json' } });
  const reservedNow = () => g.snapshot().scopes[0].limits[0].reserved;
  const call = (fetchImpl, extra = {}) => governedFetch(g, fetchImpl, { paths: ['openai/gpt-4o'], retry: false, ...extra })(url, { method: 'POST', body });

  // A usage that is not one, or whose counts are bad: served, settled as
  // estimated (what the permit held: the input estimate and max_tokens).
  let settledAt = 0;
  for (const usage of [{}, { prompt_tokens: -1, completion_tokens: 3 }, { prompt_tokens: '12', completion_tokens: 3 }, { input_token: 9 }]) {
    const response = await call(json({ choices: [], usage }));
    assert.equal(response.status, 200);
    assert.deepEqual(JSON.parse(await response.text()).usage, usage);
    assert.equal(g.livePermits(), 0, JSON.stringify(usage));
    assert.equal(reservedNow(), 0);
    const used = tokensInUse(g) - settledAt;
    settledAt = tokensInUse(g);
    assert.ok(used > 50, `charged ${used}: the estimated input and the 50 max_tokens`);
  }

  // A good usage still settles with the provider's count.
  await (await call(json({ choices: [], usage: { prompt_tokens: 7, completion_tokens: 3 } }))).text();
  assert.equal(tokensInUse(g) - settledAt, 10);

  // A body that fails midway: the read error reaches the caller, the permit is settled.
  const failing = async () => new Response(new ReadableStream({ pull(c) { c.error(new Error('connection reset mid-body')); } }), { status: 200 });
  await assert.rejects(call(failing), /connection reset mid-body/);
  assert.equal(g.livePermits(), 0);
  const failingRefusal = async () => new Response(new ReadableStream({ pull(c) { c.error(new Error('reset in a 429')); } }), { status: 429 });
  await assert.rejects(call(failingRefusal), /reset in a 429/);
  assert.equal(g.livePermits(), 0);

  // onAttempt throwing on a 200 (a logging bug): its error is thrown, the permit settled.
  const onAttempt = () => { throw new Error('logger bug'); };
  await assert.rejects(call(json({ usage: { prompt_tokens: 1, completion_tokens: 1 } }), { onAttempt }), /logger bug/);
  assert.equal(g.livePermits(), 0);
  const sse = 'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n';
  const streaming = (text) => async () => new Response(text, { status: 200, headers: { 'content-type': 'text/event-stream' } });
  await assert.rejects(call(streaming(sse), { onAttempt }), /logger bug/);
  assert.equal(g.livePermits(), 0);

  // A stream whose usage chunk is malformed: read to the end, settled with the output it carried.
  const badUsage = 'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: {"choices":[],"usage":{"prompt_tokens":"x","completion_tokens":2}}\n\ndata: [DONE]\n\n';
  const streamed = await call(streaming(badUsage));
  assert.equal(await streamed.text(), badUsage);
  assert.equal(g.livePermits(), 0);
  assert.equal(reservedNow(), 0);
});

test("routes and profiles: another governor's number is refused, not taken for this one's", async () => {
  const config = {
    scopes: {
      'openai/org': { limits: [{ dimension: 'tokens', amount: 10000, window: '1m' }] },
      'azure/eastus': { limits: [{ dimension: 'tokens', amount: 8000, window: '1m' }] },
    },
    profiles: { 'gpt-4o': { deployments: ['openai/org', 'azure/eastus'] } },
  };
  const g = Governor.fromJson(config, { clock: 'manual' });
  const other = Governor.fromJson(config, { clock: 'manual' });
  const mine = g.route(['openai/org']);
  const theirs = other.route(['azure/eastus']);
  assert.notEqual(mine, theirs, 'the first route of each governor');
  assert.ok(Number.isSafeInteger(theirs));
  const foreign = (field) => (e) => {
    invalid(field, String(field === 'route' ? theirs : theirsProfile))(e);
    assert.match(e.reason, new RegExp(`^this ${field} belongs to another governor`));
    return true;
  };
  const theirsProfile = other.profile('gpt-4o');
  assert.throws(() => g.tryAcquire({ route: theirs, inputTokens: 1 }), foreign('route'));
  await assert.rejects(g.acquire({ route: theirs, inputTokens: 1 }), foreign('route'));
  g.profile('gpt-4o');
  assert.throws(() => g.tryAcquireProfile({ profile: theirsProfile, inputTokens: 1 }), foreign('profile'));
  await assert.rejects(g.acquireProfile({ profile: theirsProfile, inputTokens: 1 }), foreign('profile'));
  // A bare index (what route numbers were) names no route either.
  assert.throws(() => g.tryAcquire({ route: 0, inputTokens: 1 }), (e) => e.field === 'route' && /another governor/.test(e.reason));
  assert.equal(g.livePermits(), 0);
  assert.equal(g.snapshot().admitted, 0);
  // Each governor's own numbers work.
  g.tryAcquire({ route: mine, inputTokens: 1 }).cancel();
  other.tryAcquire({ route: theirs, inputTokens: 1 }).cancel();
  other.tryAcquireProfile({ profile: theirsProfile, inputTokens: 1 }).cancel();
});

test('conversions: wrong types, wrapped numbers and unknown keys are InvalidRequestErrors naming the field', async () => {
  const g = gov();
  const route = g.route(['openai/gpt-4o']);
  const didYouMean = (field, near) => (e) => invalid(field)(e) && e.reason.includes(`did you mean ${near}?`);

  // Strings where the addon converts: no napi StringExpected / NumberExpected.
  assert.throws(() => g.tryAcquire({ route, text: 'hi', model: 5 }), invalid('model', '5'));
  assert.throws(() => countTokens('hi', 5), invalid('model', '5'));
  assert.throws(() => classifyResponse(429, {}, '', { provider: 5 }), invalid('provider', '5'));
  assert.throws(() => classifyResponse(429, {}, '', { nowMs: 'x' }), invalid('nowMs', '"x"'));
  assert.throws(() => classifyResponse(429, {}, '', null), invalid('options', 'null'));

  // Statuses: 100 to 999, whole; never wrapped or truncated into range.
  for (const [status, shown] of [[-1, '-1'], [NaN, 'NaN'], [429.7, '429.7'], [2 ** 32 + 429, '4294967725'], [99, '99'], [1000, '1000']]) {
    assert.throws(() => classifyResponse(status), invalid('status', shown));
    assert.throws(() => new RetryPolicy().advise({ attempt: 0, status }), invalid('status', shown));
  }
  assert.equal(classifyResponse(100).limited, false);
  assert.equal(classifyResponse(999).limited, false);
  const permit = g.tryAcquire({ route, inputTokens: 10, maxOutputTokens: 10 });
  for (const [status, shown] of [[-1, '-1'], [NaN, 'NaN'], [429.7, '429.7'], [2 ** 32 + 429, '4294967725']]) {
    assert.throws(() => permit.report(status), invalid('status', shown));
  }
  assert.equal(permit.report(999).limited, false);

  // Retry policies: counts checked, options an object of known options.
  for (const [value, shown] of [[-1, '-1'], [1.5, '1.5'], [NaN, 'NaN'], ['3', '"3"'], [2 ** 32, '4294967296']]) {
    assert.throws(() => new RetryPolicy({ maxRetries: value }), invalid('maxRetries', shown));
    assert.throws(() => new RetryPolicy({ budgetMinRetries: value }), invalid('budgetMinRetries', shown));
  }
  assert.throws(() => new RetryPolicy(5), invalid('options', '5'));
  assert.throws(() => new RetryPolicy({ maxRetry: 3 }), didYouMean('maxRetry', 'maxRetries'));
  assert.throws(() => new RetryPolicy({ jitter: true }), invalid('jitter', 'true'));
  const policy = new RetryPolicy({ maxRetries: 3 });
  assert.throws(() => policy.advise({ attempt: 0, status: 429, deadlineInMs: NaN }), invalid('deadlineInMs', 'NaN'));
  assert.throws(() => policy.advise({ attempt: 0, status: 429, deadlineInMs: '5' }), invalid('deadlineInMs', '"5"'));
  assert.throws(() => policy.advise(null), invalid('outcome', 'null'));

  // Requests: unknown keys, two inputs at once, messages and tools of the wrong shape.
  assert.throws(() => g.tryAcquire({ route, inputToken: 5000 }), didYouMean('inputToken', 'inputTokens'));
  assert.throws(() => g.tryAcquire({ paths: ['openai/gpt-4o'], input_tokens: 5 }), didYouMean('input_tokens', 'inputTokens'));
  await assert.rejects(g.acquire({ paths: ['openai/gpt-4o'], inputTokens: 1, maxOutputToken: 5 }), didYouMean('maxOutputToken', 'maxOutputTokens'));
  assert.throws(() => g.tryAcquireProfile({ profile: 'gpt-4o', inputTokens: 1, klas: 'batch' }), (e) => e.field === 'klas');
  await assert.rejects(g.acquire({ route, inputTokens: 1, input_tokens: 5 }), didYouMean('input_tokens', 'inputTokens'));
  assert.throws(() => g.tryAcquire({ route, inputTokens: 5, text: 'hello' }), invalid('text', '"hello"'));
  assert.throws(() => g.tryAcquire({ route, text: 'hello', messages: [] }), invalid('messages'));
  assert.throws(() => g.tryAcquire({ route, messages: [1] }), invalid('messages[0]', '1'));
  assert.throws(() => g.tryAcquire({ route, messages: [{ role: 'user', content: 5 }] }), invalid('messages[0].content', '5'));
  assert.throws(() => g.tryAcquire({ route, messages: [{ role: 'user', content: 'hi' }], tools: 'x' }), invalid('tools', '"x"'));
  assert.throws(() => countChatTokens([1], 'gpt-4o'), invalid('messages[0]'));

  // Values JSON cannot hold: a cycle, a BigInt.
  const circular = { role: 'user', content: 'hi' };
  circular.self = circular;
  assert.throws(() => Governor.fromJson({ ...CONFIG, circular: (() => { const o = {}; o.o = o; return o; })() }), (e) => invalid('config')(e) && /cannot be written as JSON/.test(e.reason));
  assert.throws(() => Governor.fromJson({ scopes: { a: { limits: [{ dimension: 'tokens', amount: 10n, window: '1m' }] } } }), invalid('config'));
  assert.throws(() => g.tryAcquire({ route, messages: [circular] }), invalid('messages'));
  assert.throws(() => g.tryAcquire({ route, messages: [{ role: 'user', content: 'hi', n: 1n }] }), invalid('messages'));
  assert.throws(() => g.tryAcquire({ route, messages: [{ role: 'user', content: 'hi' }], tools: [{ n: 1n }] }), invalid('tools'));
  assert.throws(() => permit.report(429, {}, circular), invalid('body'));

  // Waiting: a signal that is not an AbortSignal.
  await assert.rejects(g.acquire({ route, inputTokens: 1, signal: {} }), invalid('signal'));
  await assert.rejects(g.acquire({ route, inputTokens: 1, signal: 'x' }), invalid('signal', '"x"'));

  permit.cancel();
  assert.equal(g.livePermits(), 0);
  assert.equal(tokensInUse(g), 0);
});

test('fromToml: one line that is no TOML and no file is an InvalidConfigError naming the path', () => {
  for (const path of ['not toml at all', '/nonexistent/limits.toml']) {
    assert.throws(() => Governor.fromToml(path), (e) => {
      assert.ok(e instanceof InvalidConfigError, `${e?.name}: ${e?.message}`);
      assert.equal(e.code, 'invalid_config');
      assert.equal(e.field, 'path');
      assert.equal(e.value, path);
      assert.match(e.reason, /^cannot be read/);
      return true;
    });
  }
});

test('route and profile caches: a path holding a NUL is refused, not taken for two paths', () => {
  const g = Governor.fromJson({
    scopes: {
      'openai/org': { limits: [{ dimension: 'tokens', amount: 10000, window: '1m' }] },
      'tenants/*': { limits: [{ dimension: 'tokens', amount: 10000, window: '1m' }] },
    },
    profiles: { 'gpt-4o': { deployments: ['openai/org'] } },
  }, { clock: 'manual' });
  g.route(['tenants/x', 'openai/org']);
  // Cached under a key no other list of paths shares, and refused by the
  // core: no control character is part of a scope path.
  const nul = (e) => e instanceof InvalidPathError && e.code === 'invalid_path';
  assert.throws(() => g.route(['tenants/x\u0000openai/org']), nul);
  g.profile('gpt-4o', ['tenants/a', 'tenants/b']);
  assert.throws(() => g.profile('gpt-4o', ['tenants/a\u0000tenants/b']), nul);
  assert.throws(() => g.route(['tenants/x', 1n]), invalid('paths'));
});

test('constructors: governor options are an object of known options; a config object is not an array', () => {
  for (const options of [5, null, 'manual']) {
    assert.throws(() => Governor.fromJson(CONFIG, options), invalid('options'));
  }
  assert.throws(() => Governor.fromJson(CONFIG, { clok: 'manual' }), invalid('clok', '"manual"'));
  assert.throws(() => Governor.fromPreset('openai-gpt-4o-tier1', { clocks: 'manual' }), (e) => invalid('clocks')(e) && e.reason.includes('did you mean clock?'));
  assert.throws(() => Governor.fromJson([1]), invalid('config', '[1]'));
  assert.equal(Governor.fromJson(CONFIG).nowMs() >= 0, true);
});

test('paths, profiles and classes: a lone surrogate is refused, not read as U+FFFD and merged with another', () => {
  const g = Governor.fromJson({
    scopes: {
      'openai/org': { limits: [{ dimension: 'requests', amount: 1, window: '1m' }] },
      'tenants/*': { limits: [{ dimension: 'requests', amount: 1, window: '1m' }] },
    },
    profiles: { 'gpt-4o': { deployments: ['openai/org'] } },
  }, { clock: 'manual' });
  // As UTF-8 both would be `tenants/\uFFFD`: one tenant's budget for two.
  for (const path of ['tenants/\uD800', 'tenants/\uDFFF']) {
    assert.throws(() => g.route([path]), invalid('paths', JSON.stringify(path)));
    assert.throws(() => g.profile('gpt-4o', [path]), invalid('consumer', JSON.stringify(path)));
  }
  assert.throws(() => g.profile('gpt-\uD83D', []), invalid('profile'));
  const route = g.route(['tenants/a']);
  assert.throws(() => g.tryAcquire({ route, klass: 'batch\uDC00' }), invalid('klass'));
  assert.equal(g.snapshot().admitted, 0, 'nothing was reserved');
  // A surrogate pair is a character like any other.
  g.tryAcquire({ paths: ['tenants/\uD83D\uDE00'] }).cancel();
});

test('tryAcquire: an unknown key is refused whatever input is given, not admitted without its count', () => {
  const g = Governor.fromJson({
    scopes: { 'openai/org': { limits: [{ dimension: 'tokens', amount: 100000, window: '1m' }] } },
    profiles: { 'gpt-4o': { deployments: ['openai/org'] } },
  }, { clock: 'manual' });
  const route = g.route(['openai/org']);
  const didYouMean = (field, value, near) => (e) => invalid(field, value)(e) && e.reason.includes(`did you mean ${near}?`);
  // Admitted, these would reserve 5000 input and no output at all.
  assert.throws(() => g.tryAcquire({ route, inputTokens: 5000, maxOutputToken: 4000 }), didYouMean('maxOutputToken', '4000', 'maxOutputTokens'));
  assert.throws(() => g.tryAcquire({ route, inputTokens: 5000, max_output_tokens: 4000 }), didYouMean('max_output_tokens', '4000', 'maxOutputTokens'));
  assert.throws(() => g.tryAcquire({ paths: ['openai/org'], inputTokens: 5000, klas: 'batch' }), (e) => invalid('klas', '"batch"')(e) && /is not a field of a request/.test(e.reason));
  assert.throws(() => g.tryAcquire({ route, text: 'hello', expectedOutputToken: 10 }), didYouMean('expectedOutputToken', '10', 'expectedOutputTokens'));
  assert.throws(() => g.tryAcquire({ route, messages: [{ role: 'user', content: 'hi' }], cachedInputToken: 1 }), didYouMean('cachedInputToken', '1', 'cachedInputTokens'));
  // The profile calls, with an input given too.
  assert.throws(() => g.tryAcquireProfile({ profile: 'gpt-4o', inputTokens: 5000, maxOutputToken: 4000 }), didYouMean('maxOutputToken', '4000', 'maxOutputTokens'));
  assert.equal(g.snapshot().admitted, 0, 'nothing was reserved');
  assert.equal(g.livePermits(), 0);
  // Every known key, explicitly undefined ones too, still passes.
  g.tryAcquire({ route, inputTokens: 5000, maxOutputTokens: 4000, klass: undefined, model: 'gpt-4o' }).cancel();
});

test('settle: an output count under another shape\'s key is refused, not settled as 0 output', () => {
  const g = gov();
  const permit = g.tryAcquire({ paths: ['openai/gpt-4o'], inputTokens: 100, maxOutputTokens: 500 });
  const misplaced = (key, value, inputKey, outputKey) => (e) => {
    invalid(`usage.${key}`, value)(e);
    assert.equal(e.reason, `is not read: a usage with \`${inputKey}\` gives its output as \`${outputKey}\``);
    return true;
  };
  assert.throws(() => permit.settle({ inputTokens: 100, output_tokens: 500 }), misplaced('output_tokens', '500', 'inputTokens', 'outputTokens'));
  assert.throws(() => permit.settle({ inputTokens: 100, completion_tokens: 500 }), misplaced('completion_tokens', '500', 'inputTokens', 'outputTokens'));
  assert.throws(() => permit.settle({ inputTokens: 100, outputToken: 500 }), misplaced('outputToken', '500', 'inputTokens', 'outputTokens'));
  assert.throws(() => permit.settle({ prompt_tokens: 100, output_tokens: 500 }), misplaced('output_tokens', '500', 'prompt_tokens', 'completion_tokens'));
  assert.throws(() => permit.settle({ prompt_tokens: 100, completion_tokens: null, completion_token: 5 }), misplaced('completion_token', '5', 'prompt_tokens', 'completion_tokens'));
  assert.throws(() => permit.settle({ input_tokens: 100, completionTokens: 500 }), misplaced('completionTokens', '500', 'input_tokens', 'output_tokens'));
  assert.throws(() => permit.settle({ input_tokens: 100, cache_read_input_tokens: 10, outputTokens: 500 }), misplaced('outputTokens', '500', 'input_tokens', 'output_tokens'));
  assert.throws(() => permit.settle({ inputTokens: '100', Output_Tokens: 500 }), misplaced('Output_Tokens', '500', 'inputTokens', 'outputTokens'));
  assert.equal(permit.state, 'pending');
  assert.equal(tokensInUse(g), 600, 'still holding 100 + 500');
  // Other keys SDKs send are ignored, and a null output is none.
  const sdkExtras = { total_tokens: 600, output_tokens_details: { reasoning_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0 } };
  permit.settle({ input_tokens: 100, output_tokens: null, ...sdkExtras });
  assert.equal(tokensInUse(g), 100);
  const second = g.tryAcquire({ paths: ['openai/gpt-4o'], inputTokens: 100, maxOutputTokens: 500 });
  second.settle({ prompt_tokens: 100, completion_tokens: 7, ...sdkExtras });
  assert.equal(tokensInUse(g), 207);
});

test('advance: a step past 2^63 ns is refused, and the manual clock keeps working', () => {
  const g = Governor.fromJson({ scopes: { a: { limits: [{ dimension: 'tokens', amount: 100, window: '1m' }] } } }, { clock: 'manual' });
  const pastTheEnd = (shown, nowMs) => (e) => {
    invalid('ms', shown)(e);
    assert.equal(e.reason, `would move the clock (now ${nowMs} ms) past 2^63 ns, about 292 years`);
    return true;
  };
  assert.throws(() => g.advance(Number.MAX_SAFE_INTEGER), pastTheEnd('9007199254740991', 0));
  assert.throws(() => g.advance(2 ** 63 / 1e6 + 1), pastTheEnd('9223372036855.775', 0));
  assert.equal(g.nowMs(), 0, 'the clock did not move');
  const route = g.route(['a']);
  g.tryAcquire({ route, inputTokens: 100 }).settle({ inputTokens: 100 });
  g.advance(60_000);
  g.tryAcquire({ route, inputTokens: 100 }).settle({ inputTokens: 100 });
  // Up to the end is allowed, and the limits still refill there.
  g.advance(2 ** 63 / 1e6 - 120_000);
  g.tryAcquire({ route, inputTokens: 100 }).settle({ inputTokens: 100 });
  assert.throws(() => g.tryAcquire({ route, inputTokens: 100 }), (e) => e.code === 'rate_limited' && e.retryAfterMs > 0);
  g.advance(60_000);
  assert.throws(() => g.advance(1), pastTheEnd('1', 9223372036854));
  g.tryAcquire({ route, inputTokens: 100 }).cancel();

  // A RedisGovernor's manual clock too (advance never reaches Redis).
  const redis = RedisGovernor.fromToml('[scopes.a]\nlimits = [{ dimension = "requests", amount = 1, window = "1s" }]\n[redis]\nurl = "redis://127.0.0.1:1"\nprefix = "bad-input"\nexpected_processes = 1', { clock: 'manual' });
  assert.throws(() => redis.advance(Number.MAX_SAFE_INTEGER), pastTheEnd('9007199254740991', 0));
  assert.equal(redis.nowMs(), 0);
  redis.advance(1_000);
  assert.equal(redis.nowMs(), 1_000);
});

test('text and messages: a lone surrogate is refused, not counted as U+FFFD nor reported as bad JSON', () => {
  const g = gov();
  const route = g.route(['openai/gpt-4o']);
  const lone = (field, value) => (e) => {
    invalid(field, value === undefined ? undefined : JSON.stringify(value))(e);
    assert.equal(e.reason, 'is not valid Unicode (lone surrogates)');
    return true;
  };
  assert.throws(() => g.tryAcquire({ route, text: 'a\ud800b' }), lone('text', 'a\ud800b'));
  assert.throws(() => g.tryAcquire({ route, text: '\udfff' }), lone('text', '\udfff'));
  assert.throws(() => countTokens('a\ud800b'), lone('text', 'a\ud800b'));
  assert.throws(() => estimateTokens('a\udc00'), lone('text', 'a\udc00'));
  assert.throws(() => g.tryAcquire({ route, messages: [{ role: 'user', content: 'a\ud800b' }] }), lone('messages[0].content', 'a\ud800b'));
  const parts = [{ role: 'system', content: 'ok' }, { role: 'user', content: [{ type: 'text', text: 'fine' }, { type: 'text', text: 'x\udbff' }] }];
  assert.throws(() => g.tryAcquire({ route, messages: parts }), lone('messages[1].content[1].text', 'x\udbff'));
  assert.throws(() => countChatTokens([{ role: 'user', name: '\ud83d', content: 'hi' }], 'gpt-4o'), lone('messages[0].name', '\ud83d'));
  const tools = [{ type: 'function', function: { name: 'f', description: 'd\ude00' } }];
  assert.throws(() => g.tryAcquire({ route, messages: [{ role: 'user', content: 'hi' }], tools }), lone('tools[0].function.description', 'd\ude00'));
  assert.equal(g.snapshot().admitted, 0, 'nothing was reserved');
  // Surrogate pairs, and a backslash before `ud800` in the text, are fine.
  const pair = countChatTokens([{ role: 'user', content: 'smile \ud83d\ude00' }], 'gpt-4o');
  assert.ok(pair > 0);
  assert.ok(countChatTokens([{ role: 'user', content: 'a \\ud800 \\\\udfff' }], 'gpt-4o') > 0);
  assert.ok(countTokens('\ud83d\ude00') > 0);
  g.tryAcquire({ route, text: 'a \\ud800 b' }).cancel();
});

test('a NaN or an Infinity in a config object is refused naming its path, not written as null (left out)', () => {
  const refuses = (config, field, value) =>
    assert.throws(() => Governor.fromJson(config, { clock: 'manual' }), (e) => {
      assert.ok(e instanceof InvalidConfigError, String(e));
      assert.deepEqual([e.field, e.value], [field, value]);
      return true;
    });
  const limits = [{ dimension: 'requests', amount: 10, window: '1m' }];
  refuses({ safety_margin: NaN, scopes: { a: { limits } } }, 'safety_margin', 'NaN');
  refuses({ scopes: { p: { provider: true, limits: [{ dimension: 'tokens', amount: Infinity, window: '1m' }] } } }, 'scopes.p.limits[0].amount', 'Infinity');
  refuses({ adaptive: { decrease: -Infinity }, scopes: { a: { limits } } }, 'adaptive.decrease', '-Infinity');
});

test('tools without messages are refused naming tools, not left out of the count', () => {
  const g = gov();
  const route = g.route(['openai/gpt-4o']);
  const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }];
  for (const input of [{ inputTokens: 100 }, { text: 'hello' }, {}]) {
    assert.throws(() => g.tryAcquire({ route, tools, ...input }), (e) => invalid('tools')(e) && /only with messages/.test(e.reason));
  }
  assert.equal(g.snapshot().admitted, 0, 'nothing was reserved');
  g.tryAcquire({ route, tools, messages: [{ role: 'user', content: 'hi' }] }).cancel();
});
