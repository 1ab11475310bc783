// governedFetch on a RedisGovernor, under the real `openai` SDK against
// `llmgov mock-server`: two governors (two processes) spend one budget
// shared through Redis between them, and a provider 429 is reported into
// the route's local provider scope (RedisPermit.report), as Python's
// transports do on a RedisGovernor.
//
// Against the server named by LLMGOV_REDIS_URL (`make test-node` starts a
// private one); skipped without it, but for the option check.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import llmgov from '../dist/index.js';
import { startMock } from './helpers/mock-server.mjs';

const { DeadlineExceededError, InvalidRequestError, RateLimitedError, RedisGovernor, RetryPolicy, governedFetch } = llmgov;

const URL = process.env.LLMGOV_REDIS_URL ?? '';
const NO_SERVER = URL === '' && 'LLMGOV_REDIS_URL is not set: run `make test-node`, which starts a private redis-server';
const PATHS = ['team', 'openai/org/gpt-4o'];

const mockConfig = (rpm) => `
[server]
seed = 5
output_tokens = { min = 5, max = 20 }

[openai]
shape = "openai"
charging = "actual"
limits = [{ dimension = "requests", amount = ${rpm}, window = "1m" }]
latency = { ttft_ms = 1, ms_per_output_token = 0.1 }
`;

let prefixes = 0;

/** A team budget shared through Redis, and the provider's scope local. */
function governor(prefix, { budget, providerRpm }) {
  return RedisGovernor.fromToml(`
[scopes."team"]
limits = [{ dimension = "tokens", amount = ${budget}, window = "30d" }]
[scopes."openai/org/gpt-4o"]
provider = true
limits = [{ dimension = "requests", amount = ${providerRpm}, window = "1m" }]
[redis]
prefix = "${prefix}"
expected_processes = 2
timeout = "2s"
[redis.scopes."team"]
mode = "exact"
`);
}

const freshPrefix = (name) => `node-fetch-${name}-${process.pid}-${Date.now()}-${prefixes++}`;

let plenty;
let scarce;
before(async () => {
  if (NO_SERVER) return;
  plenty = await startMock(mockConfig(10_000));
  scarce = await startMock(mockConfig(1));
});
after(async () => {
  await plenty?.stop();
  await scarce?.stop();
});

const client = (gov, mock, options = {}) =>
  new OpenAI({
    apiKey: 'sk-test',
    baseURL: `${mock.url}/v1`,
    maxRetries: 0,
    fetch: governedFetch(gov, fetch, { paths: PATHS, deadlineMs: 1, ...options }),
  });

/** One chat call; the tokens the provider says it used. */
async function ask(sdk) {
  const answer = await sdk.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 20 });
  return answer.usage.total_tokens;
}

test('two RedisGovernors spend one budget through the openai SDK', { skip: NO_SERVER }, async () => {
  const prefix = freshPrefix('budget');
  const governors = [0, 1].map(() => governor(prefix, { budget: 400, providerRpm: 10_000 }));
  const sdks = governors.map((gov) => client(gov, plenty));
  const used = [0, 0];
  let refused;
  for (let turn = 0; turn < 100 && refused === undefined; turn++) {
    try {
      used[turn % 2] += await ask(sdks[turn % 2]);
    } catch (error) {
      refused = error;
    }
  }
  // The budget is spent: the governor refused before sending, as the wait
  // it predicts is past the fetch's deadline (the SDK wraps what its fetch
  // throws as a connection error, with the refusal as the cause).
  assert.ok(refused?.cause instanceof DeadlineExceededError, `${refused} ${refused?.cause} after ${used}`);
  assert.ok(refused.cause.retryAfterMs > 60_000, String(refused.cause));
  assert.ok(Math.min(...used) > 0, `both governors spent it: ${used}`);
  // Each call reserves about 30 tokens (its prompt and max_tokens) and
  // settles what it used: together they spent the budget, no more.
  const total = used[0] + used[1];
  assert.ok(total > 400 - 40 && total <= 400, `${used}`);
  for (const gov of governors) assert.equal(gov.health().degraded, false);
});

test('a 429 through the governed fetch holds the local provider scope', { skip: NO_SERVER }, async () => {
  // The governor allows 100 a minute where the provider allows 1, which
  // an ungoverned client takes first.
  const gov = governor(freshPrefix('429'), { budget: 100_000, providerRpm: 100 });
  await ask(new OpenAI({ apiKey: 'sk-test', baseURL: `${scarce.url}/v1`, maxRetries: 0 }));
  const sdk = client(gov, scarce, { retry: new RetryPolicy({ maxRetries: 0 }) });
  await assert.rejects(ask(sdk), (e) => e instanceof OpenAI.RateLimitError);
  // The answer's retry-after now holds the provider's scope here.
  await assert.rejects(gov.tryAcquire({ paths: PATHS, inputTokens: 1 }), (e) =>
    e instanceof RateLimitedError && e.scope === 'openai/org/gpt-4o' && e.retryAfterMs > 1000);
  assert.equal(gov.snapshot().admittedThenProviderRejected, 1);
});

test('a traffic class is refused for a RedisGovernor, naming klass', () => {
  const gov = RedisGovernor.fromToml(`
[scopes."team"]
limits = [{ dimension = "tokens", amount = 10, window = "1m" }]
[redis]
url = "redis://127.0.0.1:9"
prefix = "never"
expected_processes = 2
[redis.scopes."team"]
mode = "exact"
`);
  for (const klass of ['batch', () => 'batch']) {
    assert.throws(() => governedFetch(gov, fetch, { paths: ['team'], klass }), (e) => e instanceof InvalidRequestError && e.field === 'klass');
  }
  assert.equal(typeof governedFetch(gov, fetch, { paths: ['team'] }), 'function');
  assert.throws(() => governedFetch({}, fetch, { paths: ['team'] }), (e) => e instanceof InvalidRequestError && e.field === 'gov');
});
