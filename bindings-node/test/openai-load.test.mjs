// The real `openai` SDK under concurrent load against `llmgov mock-server`,
// governed by a governor that mirrors the provider's limits: every request
// waits its turn in the governor, no 429 reaches the provider's caller (none
// is even sent), and the governor's books match the usage the provider
// reported, token for token.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import llmgov from '../dist/index.js';
import { startMock } from './helpers/mock-server.mjs';

const { Governor, governedFetch } = llmgov;

const REQUESTS = 300;

// 100 requests a second and 8 in flight at the provider.
const MOCK = `
[server]
seed = 11
output_tokens = { min = 5, max = 40 }

[openai]
shape = "openai"
concurrency = 8
limits = [
  { dimension = "requests", amount = 100, window = "1s" },
  { dimension = "tokens", amount = 100000000, window = "1m" },
]
latency = { ttft_ms = 2, ms_per_output_token = 0.2 }
`;

// The same limits, at 90% (clocks and network jitter); tokens counted
// exactly, over a window nothing leaves during the test.
const GOVERNOR = `
[scopes."openai/org/gpt-4o"]
provider = true
safety_margin = 0.9
limits = [
  { dimension = "requests", amount = 100, window = "1s" },
  { dimension = "concurrency", amount = 8 },
]
[scopes."openai/org/gpt-4o/books"]
limits = [
  { dimension = "input_tokens", amount = 100000000, window = "1h", algorithm = "sliding_window" },
  { dimension = "tokens", amount = 100000000, window = "1h", algorithm = "sliding_window" },
]
`;

let mock;
before(async () => {
  mock = await startMock(MOCK);
});
after(async () => {
  await mock?.stop();
});

test(`${REQUESTS} concurrent requests: no 429, usage reconciled exactly`, async () => {
  const gov = Governor.fromToml(GOVERNOR);
  const statuses = [];
  const openai = new OpenAI({
    apiKey: 'sk-load',
    baseURL: `${mock.url}/v1`,
    maxRetries: 0,
    fetch: governedFetch(gov, fetch, {
      paths: ['openai/org/gpt-4o/books'],
      onAttempt: (event) => statuses.push(event.status),
    }),
  });
  const started = Date.now();
  const answers = await Promise.all(
    Array.from({ length: REQUESTS }, (_, i) =>
      openai.chat.completions.create({
        model: 'gpt-4o',
        messages: [{ role: 'user', content: `Request ${i}: ${'lorem ipsum '.repeat(i % 17)}` }],
        max_tokens: 40,
      }),
    ),
  );
  const seconds = (Date.now() - started) / 1000;
  assert.equal(answers.length, REQUESTS);
  assert.equal(statuses.length, REQUESTS, 'one attempt each: nothing was refused and retried');
  assert.deepEqual([...new Set(statuses)], [200]);
  // 100 a second at 90%, after a burst of 90: at least 2.3 s for 300.
  assert.ok(seconds >= 2, `paced: ${seconds} s`);

  const snapshot = gov.snapshot();
  assert.equal(snapshot.admitted, REQUESTS);
  assert.equal(snapshot.admittedThenProviderRejected, 0);
  assert.equal(gov.livePermits(), 0);
  const books = snapshot.scopes.find((s) => s.path === 'openai/org/gpt-4o/books').limits;
  const sum = (key) => answers.reduce((total, a) => total + a.usage[key], 0);
  assert.equal(books.find((l) => l.dimension === 'input_tokens').inUse, sum('prompt_tokens'));
  assert.equal(books.find((l) => l.dimension === 'tokens').inUse, sum('total_tokens'));
  const provider = snapshot.scopes.find((s) => s.path === 'openai/org/gpt-4o').limits;
  assert.equal(provider.find((l) => l.dimension === 'concurrency').inUse, 0);
});
