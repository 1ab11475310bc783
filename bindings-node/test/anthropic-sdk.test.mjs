// The real Anthropic SDK through governedFetch against `llmgov mock-server`:
// plain and streamed messages settle from the usage Anthropic reports
// (input at message_start, output at message_delta).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';

import llmgov from '../dist/index.js';
import { startMock } from './helpers/mock-server.mjs';

const { Governor, governedFetch } = llmgov;

const MOCK = `
[server]
seed = 5
output_tokens = { min = 5, max = 30 }

[anthropic]
shape = "anthropic"
limits = [
  { dimension = "requests", amount = 50, window = "1s" },
  { dimension = "input_tokens", amount = 1000000, window = "1m" },
  { dimension = "output_tokens", amount = 1000000, window = "1m" },
]
latency = { ttft_ms = 1, ms_per_output_token = 0.1 }
`;

const GOVERNOR = `
[scopes."anthropic/org/claude"]
provider = true
limits = [
  { dimension = "input_tokens", amount = 100000000, window = "1h", algorithm = "sliding_window" },
  { dimension = "output_tokens", amount = 100000000, window = "1h", algorithm = "sliding_window" },
]
`;

let mock;
before(async () => {
  mock = await startMock(MOCK);
});
after(async () => {
  await mock?.stop();
});

const inUse = (gov, dimension) =>
  gov.snapshot().scopes[0].limits.find((l) => l.dimension === dimension).inUse;

function client(gov) {
  return new Anthropic({
    apiKey: 'sk-ant-test',
    baseURL: mock.url,
    maxRetries: 0,
    fetch: governedFetch(gov, fetch, { paths: ['anthropic/org/claude'] }),
  });
}

const request = {
  model: 'claude-sonnet',
  max_tokens: 64,
  system: 'You are terse.',
  messages: [{ role: 'user', content: 'Name three rate-limit algorithms.' }],
};

test('a plain message settles from its usage', async () => {
  const gov = Governor.fromToml(GOVERNOR);
  const message = await client(gov).messages.create(request);
  assert.ok(message.usage.output_tokens > 0);
  assert.equal(inUse(gov, 'input_tokens'), message.usage.input_tokens);
  assert.equal(inUse(gov, 'output_tokens'), message.usage.output_tokens);
  assert.equal(gov.livePermits(), 0);
});

test('a streamed message settles when the stream ends', async () => {
  const gov = Governor.fromToml(GOVERNOR);
  const stream = await client(gov).messages.create({ ...request, stream: true });
  let input = 0;
  let output = 0;
  for await (const event of stream) {
    if (event.type === 'message_start') input = event.message.usage.input_tokens;
    if (event.type === 'message_delta') output = event.usage.output_tokens;
  }
  assert.ok(input > 0 && output > 0);
  assert.equal(inUse(gov, 'input_tokens'), input);
  assert.equal(inUse(gov, 'output_tokens'), output);
  assert.equal(gov.livePermits(), 0);
});
