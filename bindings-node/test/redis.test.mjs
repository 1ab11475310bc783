// RedisGovernor: scopes shared across processes through Redis. Two governors
// on one prefix stand for two processes, and 4 worker processes
// (helpers/redis-worker.mjs) share one budget for real; every call that reaches Redis is a
// Promise run on the thread pool, so the event loop keeps turning while one
// is in flight. `acquire` waits while a limit refuses, gives up at its
// deadline (at once when the predicted wait is past it) and holds nothing
// once aborted.
//
// Against the server named by LLMGOV_REDIS_URL (`make test-node` starts a
// private one); skipped without it, but for the event-loop test, which needs
// no server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import llmgov from '../dist/index.js';

const {
  AlreadyReconciledError,
  DeadlineExceededError,
  InvalidConfigError,
  InvalidRequestError,
  NeverFitsError,
  PermitExpiredError,
  RateLimitedError,
  RedisGovernor,
  RedisPermit,
} = llmgov;

const URL = process.env.LLMGOV_REDIS_URL ?? '';
const NO_SERVER = URL === '' && 'LLMGOV_REDIS_URL is not set: run `make test-node`, which starts a private redis-server';
const SCOPE = 'openai/org/gpt-4o';
const PATHS = [SCOPE];
// A slow call is not an outage: with the default 250 ms a loaded test
// machine would fall back to the safe share now and then.
const TIMEOUT = '2s';

const FIVE_A_SECOND = '{ dimension = "requests", amount = 5, window = "1s" }';
const ONE_A_MINUTE = '{ dimension = "requests", amount = 1, window = "1m" }';
const ONE_SLOT = '{ dimension = "concurrency", amount = 1 }';

let prefixes = 0;
const freshPrefix = (name) => `node-${name}-${process.pid}-${Date.now()}-${prefixes++}`;

/** The config of one shared exact scope with `limits`; no `url`: LLMGOV_REDIS_URL names it. */
function config(prefix, limits, { url = undefined, mode = 'exact', timeout = TIMEOUT } = {}) {
  return `
[scopes."${SCOPE}"]
limits = [${limits.join(', ')}]
[scopes."tenants/*"]
limits = [{ dimension = "requests", amount = 1000, window = "1m" }]
[redis]
${url === undefined ? '' : `url = "${url}"`}
prefix = "${prefix}"
expected_processes = 2
timeout = "${timeout}"
[redis.scopes."${SCOPE}"]
mode = "${mode}"
`;
}

/** Two governors on one prefix: two processes sharing the scope. */
function pair(name, limits) {
  const text = config(freshPrefix(name), limits);
  return [RedisGovernor.fromToml(text), RedisGovernor.fromToml(text)];
}

const one = (name, limits, options) => RedisGovernor.fromToml(config(freshPrefix(name), limits), options);

const take = (gov, extra = {}) => gov.tryAcquire({ paths: PATHS, inputTokens: 10, maxOutputTokens: 10, ...extra });

/** Takes all five requests of the second, settled. */
async function drain(gov) {
  for (let i = 0; i < 5; i++) await (await take(gov)).settle();
  await assert.rejects(take(gov), RateLimitedError);
}

test('two governors on one prefix share the limit: admitted up to it, then refused with its fields', { skip: NO_SERVER }, async () => {
  const [a, b] = pair('share', ['{ dimension = "requests", amount = 3, window = "1m" }']);
  const held = [await take(a), await take(b), await take(a)];
  assert.ok(held.every((p) => p instanceof RedisPermit && p.state === 'pending' && !p.fromFallback));
  for (const gov of [a, b]) {
    const refused = await take(gov).then(() => assert.fail('admitted past the shared limit'), (e) => e);
    assert.ok(refused instanceof RateLimitedError, String(refused));
    assert.equal(refused.code, 'rate_limited');
    assert.equal(refused.scope, SCOPE);
    assert.equal(refused.dimension, 'requests');
    assert.ok(refused.retryAfterMs > 0 && refused.retryAfterMs <= 20_000, `retryAfterMs ${refused.retryAfterMs}`);
  }
  const health = a.health();
  assert.equal(health.degraded, false);
  assert.equal(health.fallbackAdmissions, 0);
  assert.ok(health.redisCalls >= 3, `redisCalls ${health.redisCalls}`);
});

test('settle refunds the unused output, from an SDK usage object too', { skip: NO_SERVER }, async () => {
  const [a, b] = pair('refund', ['{ dimension = "tokens", amount = 1000, window = "1m" }']);
  const big = { paths: PATHS, inputTokens: 100, maxOutputTokens: 800 };
  const first = await a.tryAcquire(big);
  assert.deepEqual(first.charged, { inputTokens: 100, cachedInputTokens: 0, outputTokens: 800 });
  const other = { paths: PATHS, inputTokens: 100, maxOutputTokens: 700 };
  await assert.rejects(b.tryAcquire(other), RateLimitedError, '900 of 1000 reserved, 800 more asked');
  await first.settle({ prompt_tokens: 100, completion_tokens: 10 }); // OpenAI's usage shape
  assert.equal(first.state, 'settled');
  assert.deepEqual(first.charged, { inputTokens: 100, cachedInputTokens: 0, outputTokens: 10 });
  const second = await b.tryAcquire(other); // 110 + 800 fit
  // An output count under another shape's key is refused, not settled as 0 output.
  const misplaced = (e) => e instanceof InvalidRequestError && e.field === 'usage.output_tokens' && e.value === '5'
    && e.reason === 'is not read: a usage with `inputTokens` gives its output as `outputTokens`';
  await assert.rejects(second.settle({ inputTokens: 100, output_tokens: 5 }), misplaced);
  await assert.rejects(second.settle({ inputTokens: '100', output_tokens: 5 }), misplaced);
  assert.equal(second.state, 'pending');
  await second.settle({ inputTokens: 100, outputTokens: 5 });
});

test('cancel gives the whole reservation back, its slot included', { skip: NO_SERVER }, async () => {
  const [a, b] = pair('cancel', [ONE_SLOT]);
  const held = await take(a);
  const refused = await take(b).then(() => assert.fail('two slots of one'), (e) => e);
  assert.ok(refused instanceof RateLimitedError);
  assert.equal(refused.dimension, 'concurrency');
  assert.equal(refused.retryAfterMs, null);
  await held.cancel();
  assert.equal(held.state, 'cancelled');
  assert.deepEqual(held.charged, { inputTokens: 0, cachedInputTokens: 0, outputTokens: 0 });
  await (await take(b)).settle();
});

test('a permit reconciles once: a second settle or cancel is AlreadyReconciledError', { skip: NO_SERVER }, async () => {
  const gov = one('twice', [FIVE_A_SECOND]);
  const permit = await take(gov);
  await permit.settle({ inputTokens: 10, outputTokens: 2 });
  const again = await permit.settle({ inputTokens: 10, outputTokens: 2 }).then(() => assert.fail('settled twice'), (e) => e);
  assert.ok(again instanceof AlreadyReconciledError, String(again));
  assert.equal(again.code, 'already_reconciled');
  await assert.rejects(permit.cancel(), AlreadyReconciledError);
  assert.equal(permit.state, 'settled');
  // Two settles in flight at once: one wins, the other is refused.
  const raced = await take(gov);
  const outcomes = await Promise.allSettled([raced.settle(), raced.settle()]);
  assert.deepEqual(outcomes.map((o) => o.status).sort(), ['fulfilled', 'rejected']);
  assert.ok(outcomes.find((o) => o.status === 'rejected').reason instanceof AlreadyReconciledError);
});

test('acquire waits for a drained bucket to refill, and is admitted', { skip: NO_SERVER }, async () => {
  const [a, b] = pair('refill', [FIVE_A_SECOND]);
  await drain(a);
  await assert.rejects(take(b), RateLimitedError);
  const calls = b.health().redisCalls;
  const permit = await b.acquire({ paths: PATHS, inputTokens: 10, maxOutputTokens: 10, deadlineMs: 5_000 });
  assert.equal(permit.state, 'pending');
  // One request comes back every 200 ms and the GCRA says when: it slept
  // that long rather than asking again and again.
  const tries = b.health().redisCalls - calls;
  assert.ok(tries <= 3, `${tries} Redis calls for one wait`);
  await permit.settle();
});

test('a predicted wait past deadlineMs rejects at once with DeadlineExceededError', { skip: NO_SERVER }, async () => {
  const gov = one('deadline', [ONE_A_MINUTE]);
  await (await take(gov)).settle();
  const calls = gov.health().redisCalls;
  const refused = await gov
    .acquire({ paths: PATHS, inputTokens: 10, deadlineMs: 500 })
    .then(() => assert.fail('admitted'), (e) => e);
  assert.equal(gov.health().redisCalls - calls, 1, 'at once, after one try, not at the deadline');
  assert.ok(refused instanceof DeadlineExceededError, String(refused));
  assert.equal(refused.code, 'deadline_exceeded');
  assert.ok(refused.retryAfterMs > 50_000, `retryAfterMs ${refused.retryAfterMs}`);
});

test('a polled wait gives up when its deadline comes', { skip: NO_SERVER }, async () => {
  const gov = one('polled', [ONE_SLOT]);
  const held = await take(gov);
  const started = performance.now();
  const refused = await gov.acquire({ paths: PATHS, inputTokens: 1, deadlineMs: 150 }).then(() => assert.fail('admitted'), (e) => e);
  const waited = performance.now() - started;
  assert.ok(refused instanceof DeadlineExceededError, String(refused));
  assert.ok(waited >= 140 && refused.waitedMs >= 140, `waited ${waited} ms, waitedMs ${refused.waitedMs}`);
  assert.equal(refused.retryAfterMs, null);
  await held.cancel();
});

test('an aborted acquire rejects with the reason and holds nothing', { skip: NO_SERVER }, async () => {
  const [a, b] = pair('abort', [ONE_SLOT]);
  const held = await take(a);
  const controller = new AbortController();
  const waiting = b.acquire({ paths: PATHS, inputTokens: 1, signal: controller.signal });
  setTimeout(() => controller.abort(new Error('caller left')), 60);
  await assert.rejects(waiting, /caller left/);
  const callsAfterAbort = b.health().redisCalls;
  await held.cancel();
  // The slot is free for the other process: the aborted waiter took nothing,
  // and stopped trying.
  const next = await take(a);
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.equal(b.health().redisCalls, callsAfterAbort, 'no try after the abort');
  await next.settle();
  const aborted = AbortSignal.abort(new Error('already gone'));
  await assert.rejects(b.acquire({ paths: PATHS, inputTokens: 1, signal: aborted }), /already gone/);
});

test('NeverFits is refused at once, waiting or not', { skip: NO_SERVER }, async () => {
  const gov = one('never', ['{ dimension = "tokens", amount = 100, window = "1m" }']);
  const refused = await take(gov, { inputTokens: 500 }).then(() => assert.fail('admitted'), (e) => e);
  assert.ok(refused instanceof NeverFitsError);
  assert.equal(refused.scope, SCOPE);
  assert.equal(refused.cost, 510);
  assert.equal(refused.burst, 100);
  await assert.rejects(gov.acquire({ paths: PATHS, inputTokens: 500, deadlineMs: 10_000 }), NeverFitsError);
});

test('routes, the object form, a leased scope and returnLeases', { skip: NO_SERVER }, async () => {
  const gov = RedisGovernor.fromJson({
    scopes: { [SCOPE]: { limits: [{ dimension: 'tokens', amount: 10000, window: '1m' }] } },
    redis: { url: URL, prefix: freshPrefix('json'), expected_processes: 2, timeout: TIMEOUT, scopes: { [SCOPE]: { mode: 'leased' } } },
  });
  const route = gov.route(PATHS);
  assert.equal(gov.route([SCOPE]), route, 'cached');
  assert.deepEqual(route.paths, PATHS);
  const permit = await gov.tryAcquire({ route, text: 'Hello, world', maxOutputTokens: 50 });
  assert.ok(permit.charged.inputTokens > 0, 'the text was counted');
  await permit.settle({ input_tokens: permit.charged.inputTokens, output_tokens: 7 }); // Anthropic's shape
  await gov.returnLeases();
  assert.equal(gov.health().degraded, false);
});

test('bad input names the field and the value', { skip: NO_SERVER }, async () => {
  const gov = one('bad', [FIVE_A_SECOND]);
  const fieldOf = async (promise) => {
    const error = await promise.then(() => assert.fail('accepted'), (e) => e);
    assert.ok(error instanceof InvalidRequestError, String(error));
    return [error.field, error.value];
  };
  assert.deepEqual(await fieldOf(take(gov, { inputTokens: -1 })), ['inputTokens', '-1']);
  assert.deepEqual(await fieldOf(take(gov, { maxOutputTokens: 1.5 })), ['maxOutputTokens', '1.5']);
  assert.deepEqual(await fieldOf(take(gov, { inputToken: 5 })), ['inputToken', '5']);
  assert.deepEqual(await fieldOf(take(gov, { klass: 'batch' })), ['klass', '"batch"']);
  assert.deepEqual(await fieldOf(take(gov, { expectedOutputTokens: 5 })), ['expectedOutputTokens', '5']);
  assert.deepEqual(await fieldOf(gov.acquire({ paths: PATHS, deadlineMs: -5 })), ['deadlineMs', '-5']);
  assert.deepEqual(await fieldOf(gov.acquire({ paths: PATHS, signal: 'soon' })), ['signal', '"soon"']);
  const permit = await take(gov);
  assert.deepEqual(await fieldOf(permit.settle({ inputTokens: 10, outputTokens: -3 })), ['outputTokens', '-3']);
  assert.equal(permit.state, 'pending', 'a refused usage changes nothing');
  await permit.cancel();
  const otherRoute = one('bad-other', [FIVE_A_SECOND]).route(PATHS);
  assert.deepEqual((await fieldOf(gov.tryAcquire({ route: otherRoute, inputTokens: 1 })))[0], 'route');

  const badConfig = (text) => {
    try {
      RedisGovernor.fromToml(text);
    } catch (error) {
      assert.ok(error instanceof InvalidConfigError, String(error));
      return [error.field, error.value];
    }
    assert.fail('built');
  };
  const good = config(freshPrefix('bad-config'), [FIVE_A_SECOND]);
  assert.deepEqual(badConfig(good.replace('expected_processes = 2', 'expected_processes = 0')), ['redis.expected_processes', '0']);
  assert.deepEqual(badConfig(good.replace(`timeout = "${TIMEOUT}"`, 'timeout = "soon"')), ['redis.timeout', 'soon']);
  assert.deepEqual(badConfig(good.replace('mode = "exact"', 'mode = "fast"')), ['redis.scopes.openai/org/gpt-4o.mode', 'fast']);
  assert.throws(() => RedisGovernor.fromToml(good, { clock: 'sundial' }), (e) => e instanceof InvalidRequestError && e.field === 'clock');
});

/** A daily limit of `amount` requests on the shared scope, in `mode`: nothing refills during the test. */
const daily = (prefix, amount, mode) =>
  config(prefix, [`{ dimension = "requests", amount = ${amount}, window = "1d" }`], { mode, url: URL }).replace(
    'expected_processes = 2',
    `expected_processes = ${WORKERS}`,
  );
const WORKERS = 4;

/** Runs WORKERS worker processes on `text`, released together; what each admitted. */
async function workers(text, attempts) {
  const script = join(dirname(fileURLToPath(import.meta.url)), 'helpers', 'redis-worker.mjs');
  const start = Date.now() + 1_500; // after every worker has loaded the addon
  const runs = Array.from({ length: WORKERS }, () =>
    new Promise((resolve, reject) =>
      execFile(process.execPath, [script, text, String(start), String(attempts)], { timeout: 60_000 }, (error, out) =>
        error ? reject(error) : resolve(JSON.parse(out)),
      ),
    ),
  );
  const results = await Promise.all(runs);
  assert.ok(results.every((r) => r.fallbackAdmissions === 0), 'no worker fell back to its safe share');
  return results.map((r) => r.admitted);
}

test('worker processes share one budget: exact admits exactly the limit, leased at most it', { skip: NO_SERVER }, async () => {
  const exact = await workers(daily(freshPrefix('procs-exact'), 60, 'exact'), 40);
  assert.equal(exact.reduce((a, b) => a + b), 60, `admitted per process: ${exact}`);

  const prefix = freshPrefix('procs-leased');
  const leased = await workers(daily(prefix, 80, 'leased'), 40);
  const total = leased.reduce((a, b) => a + b);
  assert.ok(total <= 80 && total >= 60, `admitted per process: ${leased}`);
  // Every worker gave its unused lease back: a newcomer gets exactly the rest.
  const newcomer = RedisGovernor.fromToml(daily(prefix, 80, 'leased'));
  let rest = 0;
  for (let i = 0; i < 100; i++) {
    const admitted = await newcomer.tryAcquire({ paths: PATHS, inputTokens: 1 }).then((p) => p.settle().then(() => true), () => false);
    if (!admitted) break;
    rest++;
  }
  assert.equal(total + rest, 80, `${total} by the workers, ${rest} by the newcomer`);
});

test('a manual clock expires a permit: settling it rejects with PermitExpiredError', { skip: NO_SERVER }, async () => {
  const gov = RedisGovernor.fromToml(`permit_ttl = "1s"\n${config(freshPrefix('expiry'), [FIVE_A_SECOND])}`, { clock: 'manual' });
  assert.equal(gov.nowMs(), 0);
  const permit = await take(gov);
  gov.advance(1_500);
  await assert.rejects(permit.settle(), PermitExpiredError);
  assert.equal(permit.state, 'expired');
  assert.throws(() => one('expiry-monotonic', [FIVE_A_SECOND]).advance(1), (e) => e instanceof InvalidRequestError && e.field === 'clock');
});

/** The first refusal of `gov` on `paths` within 50 tries: a hold sent on the pool lands within the calls queued behind it. */
async function firstRefusal(gov, paths) {
  for (let attempt = 0; attempt < 50; attempt++) {
    try {
      await (await gov.tryAcquire({ paths, inputTokens: 10 })).cancel();
    } catch (e) {
      return e;
    }
  }
  return undefined;
}

test('a 429 reported on one RedisGovernor holds a shared provider scope for the other, off the event loop', { skip: NO_SERVER }, async () => {
  const prefix = freshPrefix('report-shared');
  const config = `
[scopes."openai/key"]
provider = true
limits = [{ dimension = "requests", amount = 1000, window = "1m" }]
[redis]
prefix = "${prefix}"
expected_processes = 2
timeout = "${TIMEOUT}"
[redis.scopes."openai/key"]
mode = "exact"
`;
  const [a, b] = [RedisGovernor.fromToml(config), RedisGovernor.fromToml(config)];
  const paths = ['openai/key'];
  const permit = await a.tryAcquire({ paths, inputTokens: 10 });
  // The answer is read at once; holding the scope in Redis runs on the pool.
  const c = permit.report(429, { 'retry-after': '30' }, '');
  assert.equal(c.kind, 'rate_limited');
  await permit.cancel();
  // The hold lands within the calls queued behind it: the other governor
  // is then refused for the whole retry-after.
  const held = await firstRefusal(b, paths);
  assert.ok(held instanceof RateLimitedError, `b was never held: ${held}`);
  assert.equal(held.scope, 'openai/key');
  assert.ok(held.retryAfterMs >= 29_000, String(held.retryAfterMs));
  assert.equal(a.health().degraded, false);
});

test('addOutput charges streamed output on the local scopes at once, with no Redis call', { skip: NO_SERVER }, async () => {
  const gov = RedisGovernor.fromToml(`
[scopes."team"]
limits = [{ dimension = "tokens", amount = 100000, window = "1m" }]
[scopes."openai/key"]
limits = [{ dimension = "output_tokens", amount = 100, window = "1m" }]
[redis]
prefix = "${freshPrefix('add-output')}"
expected_processes = 2
timeout = "${TIMEOUT}"
[redis.scopes."team"]
mode = "exact"
`);
  const paths = ['team', 'openai/key'];
  const streaming = await gov.tryAcquire({ paths, inputTokens: 10, maxOutputTokens: 40 });
  const calls = gov.health().redisCalls;
  streaming.addOutput(30);
  streaming.addOutput(40); // 70 streamed: 30 past the reservation, charged at once
  assert.equal(gov.health().redisCalls, calls);
  assert.equal(streaming.charged.outputTokens, 70);
  await assert.rejects(gov.tryAcquire({ paths, inputTokens: 10, maxOutputTokens: 40 }),
    (e) => e instanceof RateLimitedError && e.scope === 'openai/key');
  assert.throws(() => streaming.addOutput(-1), (e) => e instanceof InvalidRequestError && e.field === 'tokens');
  await streaming.settle(); // as estimated: the 70 streamed
  assert.equal(streaming.charged.outputTokens, 70);
  assert.throws(() => streaming.addOutput(1), (e) => e instanceof AlreadyReconciledError);
});

test('failures reported on one RedisGovernor open a breaker that holds a shared provider scope for the other', { skip: NO_SERVER }, async () => {
  const config = `
[adaptive.breaker]
failures = 2
pauses = ["30s"]
[scopes."openai/key"]
provider = true
limits = [{ dimension = "requests", amount = 1000, window = "1m" }]
[redis]
prefix = "${freshPrefix('report-breaker')}"
expected_processes = 2
timeout = "${TIMEOUT}"
[redis.scopes."openai/key"]
mode = "exact"
`;
  const [a, b] = [RedisGovernor.fromToml(config), RedisGovernor.fromToml(config)];
  const paths = ['openai/key'];
  for (let failure = 0; failure < 2; failure++) {
    const permit = await a.tryAcquire({ paths, inputTokens: 10 });
    assert.equal(permit.report(500, {}, '').kind, 'none');
    await permit.cancel();
  }
  // The second failure opened the breaker; its hold runs on the pool.
  const held = await firstRefusal(b, paths);
  assert.ok(held instanceof RateLimitedError, `b was never held: ${held}`);
  assert.equal(held.scope, 'openai/key');
  assert.ok(held.retryAfterMs > 29_000 && held.retryAfterMs <= 31_000, String(held.retryAfterMs));
});

test("report feeds a provider's answer into the route's local scopes; on shared scopes alone it only classifies", { skip: NO_SERVER }, async () => {
  const prefix = freshPrefix('report');
  const gov = RedisGovernor.fromToml(`
[scopes."openai/org"]
provider = true
limits = [{ dimension = "requests", amount = 1000, window = "1m" }]
[scopes."team"]
limits = [{ dimension = "tokens", amount = 100000, window = "1m" }]
[redis]
prefix = "${prefix}"
expected_processes = 1
timeout = "${TIMEOUT}"
[redis.scopes."team"]
mode = "exact"
`, { clock: 'manual' });
  const paths = ['team', 'openai/org'];
  const permit = await gov.tryAcquire({ paths, inputTokens: 10, maxOutputTokens: 10 });
  const c = permit.report(429, { 'retry-after': '30' }, '');
  assert.equal(c.limited, true);
  assert.equal(c.retryAfterMs, 30_000);
  await permit.cancel();
  // The local provider scope holds the next request for the retry-after.
  await assert.rejects(gov.tryAcquire({ paths, inputTokens: 10 }), (e) =>
    e instanceof RateLimitedError && e.scope === 'openai/org' && e.retryAfterMs >= 29_000);
  assert.equal(gov.snapshot().admittedThenProviderRejected, 1);
  gov.advance(31_000);
  await (await gov.tryAcquire({ paths, inputTokens: 10 })).settle();

  // An SDK APIError and a fetch Response are read as Permit.report reads them.
  const shared = await gov.tryAcquire({ paths: ['team'], inputTokens: 10 });
  const fromError = shared.report({ status: 503, headers: {}, error: { message: 'overloaded' } });
  assert.equal(fromError.status, 503);
  const fromResponse = await shared.report(new Response('{}', { status: 200, headers: { 'x-ratelimit-remaining-tokens': '5' } }));
  assert.equal(fromResponse.limited, false);
  assert.equal(fromResponse.remaining.tokens, 5);
  assert.throws(() => shared.report(42), (e) => e instanceof InvalidRequestError && e.field === 'status');
  assert.throws(() => shared.report('429'), (e) => e instanceof InvalidRequestError && e.field === 'response');
  await shared.settle();
  // Shared scopes took no feedback: the team's budget is untouched by the answers.
  assert.equal(gov.snapshot().admittedThenProviderRejected, 1);
});

test('the event loop keeps turning while a Redis call is in flight', async () => {
  // A server that accepts and never answers: the acquire waits out its
  // timeout on the thread pool, then admits from the safe local share.
  const sockets = new Set();
  const silent = createServer((socket) => sockets.add(socket));
  await new Promise((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const url = `redis://127.0.0.1:${silent.address().port}`;
  try {
    const gov = RedisGovernor.fromToml(config(freshPrefix('loop'), [FIVE_A_SECOND], { url, timeout: '400ms' }));
    let ticks = 0;
    const ticker = setInterval(() => ticks++, 10);
    const started = performance.now();
    let acquired = false;
    const acquiring = take(gov).then((p) => ((acquired = true), p));
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(acquired, false, 'still waiting on the silent server');
    assert.ok(ticks >= 3, `the timer fired ${ticks} times in 100 ms`);
    const permit = await acquiring;
    clearInterval(ticker);
    assert.ok(performance.now() - started >= 350, 'it did wait on the server');
    assert.equal(permit.fromFallback, true);
    assert.equal(gov.health().degraded, true);
    assert.ok(ticks >= 15, `the timer fired ${ticks} times during a 400 ms call`);
    await permit.cancel();
  } finally {
    for (const socket of sockets) socket.destroy();
    silent.close();
  }
});

test("the README's RedisGovernor example runs", { skip: NO_SERVER }, () => {
  const root = join(dirname(fileURLToPath(import.meta.url)), '..');
  const section = readFileSync(join(root, 'README.md'), 'utf8').split('## One budget across processes')[1] ?? '';
  const block = /```js\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(block, 'README.md has a RedisGovernor example');
  // Inside the package, so that `import 'llmgov'` resolves to it.
  const file = join(root, 'examples', '.readme-redis.mjs');
  writeFileSync(file, block);
  try {
    const out = execFileSync(process.execPath, [file], { cwd: root, encoding: 'utf8', timeout: 60_000 });
    assert.match(out, /^shared limit reached: retry after \d+ ms$/m);
    assert.match(out, /^deadline_exceeded$/m);
    assert.match(out, /degraded: false/);
  } finally {
    rmSync(file);
  }
});
