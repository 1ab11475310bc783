// The real `openai` SDK through governedFetch against `llmgov mock-server`:
// plain and streamed answers settle from their usage; a provider 429 is
// reported and retried after its advice, and never reaches the caller.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import llmgov from '../dist/index.js';
import { startMock } from './helpers/mock-server.mjs';

const { Governor, governedFetch } = llmgov;

// Two requests a second at the provider, so the third in a burst gets a
// 429 with a retry-after of about half a second; tokens never bind.
const MOCK = `
[server]
seed = 3
output_tokens = { min = 5, max = 20 }

[openai]
shape = "openai"
limits = [
  { dimension = "requests", amount = 2, window = "1s" },
  { dimension = "tokens", amount = 10000000, window = "1m" },
]
latency = { ttft_ms = 1, ms_per_output_token = 0.1 }
`;

// The governor does not know the provider's request limit (so the provider
// refuses); it counts tokens exactly, over a window nothing leaves during
// the test, so what is in use is the sum of what was settled.
const GOVERNOR = `
[scopes."openai/org/gpt-4o"]
provider = true
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

function client(gov, options = {}) {
  return new OpenAI({
    apiKey: 'sk-test',
    baseURL: `${mock.url}/v1`,
    maxRetries: 0,
    fetch: governedFetch(gov, fetch, { paths: ['openai/org/gpt-4o'], ...options }),
  });
}

function inUse(gov, dimension) {
  const scope = gov.snapshot().scopes.find((s) => s.path === 'openai/org/gpt-4o');
  return scope.limits.find((l) => l.dimension === dimension).inUse;
}

const messages = [{ role: 'user', content: 'Say something short about rate limits.' }];

test('a plain answer settles from its usage', async () => {
  const gov = Governor.fromToml(GOVERNOR);
  const answer = await client(gov).chat.completions.create({ model: 'gpt-4o', messages, max_tokens: 50 });
  assert.ok(answer.usage.completion_tokens > 0);
  assert.equal(inUse(gov, 'tokens'), answer.usage.total_tokens);
  assert.equal(inUse(gov, 'input_tokens'), answer.usage.prompt_tokens);
  assert.equal(gov.livePermits(), 0);
  await new Promise((r) => setTimeout(r, 1100)); // let the provider's two a second refill
});

test('a stream settles from its final usage chunk (include_usage added when asked)', async () => {
  const gov = Governor.fromToml(GOVERNOR);
  const stream = await client(gov, { includeUsage: true }).chat.completions.create({
    model: 'gpt-4o',
    messages,
    max_tokens: 50,
    stream: true,
  });
  let text = '';
  let usage;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.ok(text.length > 0);
  assert.ok(usage, 'the final usage chunk arrived');
  assert.equal(inUse(gov, 'tokens'), usage.total_tokens);
  assert.equal(gov.livePermits(), 0);
  await new Promise((r) => setTimeout(r, 1100));
});

test('a provider 429 is reported and retried after its advice; the caller never sees it', async () => {
  const gov = Governor.fromToml(GOVERNOR);
  const attempts = [];
  const openai = client(gov, { onAttempt: (e) => attempts.push(e) });
  const answers = await Promise.all(
    [0, 1, 2, 3].map(() => openai.chat.completions.create({ model: 'gpt-4o', messages, max_tokens: 20 })),
  );
  assert.equal(answers.length, 4);
  const refused = attempts.filter((a) => a.status === 429);
  assert.ok(refused.length >= 1, `the burst of 4 met the provider's 2 a second: ${JSON.stringify(attempts)}`);
  for (const r of refused) {
    assert.equal(r.next, 'retry');
    assert.ok(r.delayMs >= 1, 'waits the retry-after');
  }
  const snapshot = gov.snapshot();
  assert.equal(snapshot.admittedThenProviderRejected, refused.length);
  // Every answer's usage is what the governor holds: each refused attempt
  // was refunded (the 429's report and the advice pace the retries).
  const settled = answers.reduce((sum, a) => sum + a.usage.total_tokens, 0);
  assert.equal(inUse(gov, 'tokens'), settled);
  assert.equal(gov.livePermits(), 0);
});
