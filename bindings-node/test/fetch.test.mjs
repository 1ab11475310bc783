// governedFetch against a fake provider (a fetch function answering what
// the test gives), on a governor with the manual clock: what each kind of
// answer reserves and settles, the same as the Python transport.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import llmgov from '../dist/index.js';

const { Governor, RetryPolicy, countTokens, governedFetch } = llmgov;

const CONFIG = {
  scopes: {
    api: {
      limits: [
        { dimension: 'input_tokens', amount: 1000000, window: '1m' },
        { dimension: 'output_tokens', amount: 1000000, window: '1m' },
      ],
    },
  },
};
const gov = () => Governor.fromJson(CONFIG, { clock: 'manual' });
const limit = (g, dimension) => g.snapshot().scopes[0].limits.find((l) => l.dimension === dimension);
const inUse = (g) => ({ input: limit(g, 'input_tokens').inUse, output: limit(g, 'output_tokens').inUse });

const OPENAI = 'https://api.openai.com/v1/chat/completions';
const ANTHROPIC = 'https://api.anthropic.com/v1/messages';
const RESPONSES = 'https://api.openai.com/v1/responses';
const messages = [{ role: 'user', content: 'Name three rate-limit algorithms.' }];
const post = (body) => ({ method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

/** A governed fetch over `fetchImpl`, no retries unless asked. */
const governed = (g, fetchImpl, extra = {}) => governedFetch(g, fetchImpl, { paths: ['api'], retry: false, ...extra });

/** A fetch answering `body` with `init` every time. */
const answering = (body, init = {}) => async () => new Response(body, { status: 200, ...init });
const sse = (events) => events.map((e) => `data: ${typeof e === 'string' ? e : JSON.stringify(e)}\n\n`).join('');
const streaming = (events) => answering(sse(events), { headers: { 'content-type': 'text/event-stream' } });

test('an Anthropic stream settles with message_start input and message_delta output; the nulls of message_delta erase neither', async () => {
  const g = gov();
  const events = [
    { type: 'message_start', message: { usage: { input_tokens: 10, cache_read_input_tokens: 5, output_tokens: 1 } } },
    { type: 'content_block_delta', delta: { type: 'text_delta', text: 'Token bucket, GCRA, sliding window.' } },
    { type: 'message_delta', usage: { input_tokens: null, output_tokens: 300, cache_read_input_tokens: null, cache_creation_input_tokens: null } },
    { type: 'message_stop' },
  ];
  const body = { model: 'claude-sonnet', max_tokens: 4000, stream: true, messages };
  const response = await governed(g, streaming(events))(ANTHROPIC, post(body));
  assert.equal(await response.text(), sse(events));
  assert.deepEqual(inUse(g), { input: 15, output: 300 });
  assert.equal(g.livePermits(), 0);
});

test('a binary answer reaches the caller byte for byte, its content-length still true', async () => {
  const g = gov();
  const bytes = new Uint8Array([0xff, 0xfe, 0x00, 0x80, 0xc3, 0x28, 0x7b, 0x0a, 0xe2, 0x82]);
  const headers = { 'content-type': 'application/octet-stream', 'content-length': String(bytes.length) };
  const response = await governed(g, answering(bytes, { headers }))('https://api.openai.com/v1/audio/speech', post({ model: 'tts-1', input: 'hi' }));
  const received = new Uint8Array(await response.arrayBuffer());
  assert.deepEqual(received, bytes);
  assert.equal(response.headers.get('content-length'), String(received.length));
  assert.equal(g.livePermits(), 0);

  // fetch decoded a gzipped body: the headers say so, not the wire's.
  const gzipped = { ...headers, 'content-encoding': 'gzip', 'content-length': '4' };
  const decoded = await governed(g, answering(bytes, { headers: gzipped }))('https://api.openai.com/v1/audio/speech', post({ model: 'tts-1', input: 'hi' }));
  assert.deepEqual(new Uint8Array(await decoded.arrayBuffer()), bytes);
  assert.equal(decoded.headers.get('content-length'), String(bytes.length));
  assert.equal(decoded.headers.get('content-encoding'), null);
});

test('a JSON answer still settles from its usage, with or without a JSON content-type', async () => {
  for (const headers of [{ 'content-type': 'application/json; charset=utf-8' }, {}]) {
    const g = gov();
    const answer = JSON.stringify({ choices: [], usage: { prompt_tokens: 7, completion_tokens: 3 } });
    const response = await governed(g, answering(answer, { headers }))(OPENAI, post({ model: 'gpt-4o', messages, max_tokens: 50 }));
    assert.equal(await response.text(), answer);
    assert.deepEqual(inUse(g), { input: 7, output: 3 });
  }
});

/** A fetch that records what each attempt reserved and sent, and answers `answers` in turn (the last one again). */
function recording(g, answers) {
  const sent = [];
  const fetchImpl = async (input, init) => {
    const body = input instanceof Request ? await input.text() : init?.body === undefined ? '' : await new Response(init.body).text();
    sent.push({ body, reserved: { input: limit(g, 'input_tokens').reserved, output: limit(g, 'output_tokens').reserved } });
    const answer = answers[Math.min(sent.length - 1, answers.length - 1)];
    return new Response(answer.body ?? '{}', { status: answer.status ?? 200, headers: answer.headers ?? { 'content-type': 'application/json' } });
  };
  return { sent, fetchImpl };
}

test('a Request, or a body given as bytes, a Blob or a stream, is estimated as the same JSON given as a string', async () => {
  const json = JSON.stringify({ model: 'gpt-4o', messages, max_tokens: 50 });
  const first = gov();
  const asString = recording(first, [{}]);
  await governed(first, asString.fetchImpl)(OPENAI, { method: 'POST', body: json });
  const expected = asString.sent[0].reserved;
  assert.ok(expected.input > 0);
  assert.equal(expected.output, 50);
  const bodies = {
    request: () => [new Request(OPENAI, { method: 'POST', body: json })],
    bytes: () => [OPENAI, { method: 'POST', body: new TextEncoder().encode(json) }],
    blob: () => [OPENAI, { method: 'POST', body: new Blob([json]) }],
    stream: () => [OPENAI, { method: 'POST', body: new Response(json).body, duplex: 'half' }],
  };
  for (const [kind, args] of Object.entries(bodies)) {
    const g = gov();
    const { sent, fetchImpl } = recording(g, [{}]);
    await governed(g, fetchImpl)(...args());
    assert.deepEqual(sent[0].reserved, expected, kind);
    assert.equal(sent[0].body, json, kind);
    assert.equal(g.livePermits(), 0, kind);
  }
});

test('a body that is not a JSON object is estimated from its text, with no output reserved, as in Python', async () => {
  for (const text of ['Summarise the rate-limit algorithms of the world, please.', '[1, 2, 3]']) {
    const g = gov();
    const { sent, fetchImpl } = recording(g, [{}]);
    await governed(g, fetchImpl)('https://api.example.com/v1/generate', { method: 'POST', body: text });
    assert.deepEqual(sent[0].reserved, { input: llmgov.estimateTokens(text), output: 0 }, text);
  }
});

test('includeUsage reaches a streamed OpenAI request given as a Request', async () => {
  const g = gov();
  const { sent, fetchImpl } = recording(g, [{ body: sse(['[DONE]']), headers: { 'content-type': 'text/event-stream' } }]);
  const request = new Request(OPENAI, { method: 'POST', body: JSON.stringify({ model: 'gpt-4o', messages, stream: true }) });
  await (await governed(g, fetchImpl, { includeUsage: true })(request)).text();
  assert.deepEqual(JSON.parse(sent[0].body).stream_options, { include_usage: true });
});

test('a Request refused with a 429 is sent again whole, not thrown as "Body is unusable"', async () => {
  const g = gov();
  const json = JSON.stringify({ model: 'gpt-4o', messages, max_tokens: 50 });
  const { sent, fetchImpl } = recording(g, [
    { status: 429, body: '{"error":{"code":"rate_limit_exceeded"}}' },
    { body: JSON.stringify({ usage: { prompt_tokens: 7, completion_tokens: 3 } }) },
  ]);
  const retry = new RetryPolicy({ baseDelayMs: 0, maxDelayMs: 0 });
  const response = await governed(g, fetchImpl, { retry })(new Request(OPENAI, { method: 'POST', body: json }));
  assert.equal(response.status, 200);
  assert.deepEqual(sent.map((s) => s.body), [json, json]);
  assert.equal(sent[1].reserved.output, 50);
  assert.equal(g.livePermits(), 0);
});

const LONG_TEXT = 'Token buckets refill at a steady rate; sliding windows count what the last minute used. '.repeat(40);
const deltas = (kind, text) => text.match(/.{1,40}/gs).map((piece) => kind(piece));

test('an Anthropic stream cut before message_delta settles the output it carried, not the 1 of message_start', async () => {
  const g = gov();
  const events = [
    { type: 'message_start', message: { usage: { input_tokens: 10, output_tokens: 1 } } },
    ...deltas((text) => ({ type: 'content_block_delta', delta: { type: 'text_delta', text } }), LONG_TEXT),
  ];
  const body = { model: 'claude-sonnet', max_tokens: 4000, stream: true, messages };
  await (await governed(g, streaming(events))(ANTHROPIC, post(body))).text();
  const seen = countTokens(LONG_TEXT, 'claude-sonnet');
  assert.ok(seen > 500);
  assert.deepEqual(inUse(g), { input: 10, output: seen });
  assert.equal(g.livePermits(), 0);
});

test('a Responses-API stream settles from response.completed, or from its text when cut', async () => {
  const textEvents = deltas((delta) => ({ type: 'response.output_text.delta', delta }), LONG_TEXT);
  const body = { model: 'gpt-4o', input: 'Name three rate-limit algorithms.', max_output_tokens: 4000, stream: true };
  const usage = { input_tokens: 12, output_tokens: 345, input_tokens_details: { cached_tokens: 2 } };
  const completed = { type: 'response.completed', response: { status: 'completed', usage } };

  const g = gov();
  const views = [];
  await (await governed(g, streaming([...textEvents, completed]), { paths: (view) => (views.push(view.api), ['api']) })(RESPONSES, post(body))).text();
  assert.deepEqual(views, ['responses']);
  assert.deepEqual(inUse(g), { input: 12, output: 345 });

  const cut = gov();
  const { sent, fetchImpl } = recording(cut, [{ body: sse(textEvents), headers: { 'content-type': 'text/event-stream' } }]);
  await (await governed(cut, fetchImpl)(RESPONSES, post(body))).text();
  assert.deepEqual(inUse(cut), { input: sent[0].reserved.input, output: countTokens(LONG_TEXT, 'gpt-4o') });
  assert.equal(cut.livePermits(), 0);
});

test('an OpenAI stream cut after its usage chunk settles the larger of the usage and the text it carried', async () => {
  const g = gov();
  const chunks = deltas((content) => ({ choices: [{ delta: { content } }] }), LONG_TEXT);
  const events = [...chunks, { choices: [], usage: { prompt_tokens: 9, completion_tokens: 2 } }];
  await (await governed(g, streaming(events))(OPENAI, post({ model: 'gpt-4o', messages, stream: true }))).text();
  assert.deepEqual(inUse(g), { input: 9, output: countTokens(LONG_TEXT, 'gpt-4o') });
  const finished = gov();
  await (await governed(finished, streaming([...events, '[DONE]']))(OPENAI, post({ model: 'gpt-4o', messages, stream: true }))).text();
  assert.deepEqual(inUse(finished), { input: 9, output: 2 }, "a finished stream: the provider's count stands");
});

test('a body with a lone surrogate is estimated from its text and sent, as in Python', async () => {
  const g = gov();
  const { sent, fetchImpl } = recording(g, [{ body: '{}' }]);
  const body = { model: 'gpt-4o', messages: [{ role: 'user', content: `half a pair: \ud800 ${LONG_TEXT}` }] };
  await governed(g, fetchImpl)(OPENAI, post(body));
  assert.equal(sent.length, 1);
  assert.ok(sent[0].reserved.input > 500, `${sent[0].reserved.input}`);
});

test('a connection error refunds only a request that never left, as in Python', async () => {
  const failing = (code) => async () => {
    throw Object.assign(new TypeError('fetch failed'), { cause: Object.assign(new Error(code), { code }) });
  };
  for (const [code, sent] of [['ECONNREFUSED', false], ['ENOTFOUND', false], ['UND_ERR_CONNECT_TIMEOUT', false], ['UND_ERR_SOCKET', true], ['ECONNRESET', true]]) {
    const g = gov();
    await assert.rejects(governed(g, failing(code))(OPENAI, post({ model: 'gpt-4o', messages, max_tokens: 100 })), /fetch failed/);
    const { input, output } = inUse(g);
    assert.equal(output, 0, code);
    assert.equal(input > 0, sent, `${code}: input ${input}`);
    assert.equal(g.livePermits(), 0);
  }
});

test('an API of no known shape is estimated by its input, with no output reserved, as in Python', async () => {
  const g = gov();
  const { sent, fetchImpl } = recording(g, [{ body: '{}' }]);
  await governed(g, fetchImpl)('https://api.openai.com/v1/embeddings', post({ model: 'text-embedding-3-small', input: LONG_TEXT }));
  assert.deepEqual(sent[0].reserved, { input: countTokens(LONG_TEXT, 'gpt-4o'), output: 0 });
});

test('a cut stream counts the tool calls and thinking it carried, as Python does', async () => {
  const kinds = [
    [OPENAI, (piece) => ({ choices: [{ delta: { tool_calls: [{ index: 0, function: { arguments: piece } }] } }] })],
    [RESPONSES, (delta) => ({ type: 'response.function_call_arguments.delta', delta })],
    [ANTHROPIC, (partial_json) => ({ type: 'content_block_delta', delta: { type: 'input_json_delta', partial_json } })],
    [ANTHROPIC, (thinking) => ({ type: 'content_block_delta', delta: { type: 'thinking_delta', thinking } })],
  ];
  for (const [url, kind] of kinds) {
    const g = gov();
    const body = { model: 'gpt-4o', max_tokens: 4000, max_output_tokens: 4000, stream: true, messages, input: 'go' };
    await (await governed(g, streaming(deltas(kind, LONG_TEXT)))(url, post(body))).text();
    assert.equal(inUse(g).output, countTokens(LONG_TEXT, 'gpt-4o'), url);
  }
});

test('tool calls, tool results and Responses items count in the estimate, none refused', async () => {
  const reserved = async (url, body) => {
    const g = gov();
    const { sent, fetchImpl } = recording(g, [{ body: '{}' }]);
    await governed(g, fetchImpl)(url, post(body));
    return sent[0].reserved.input;
  };
  const call = { role: 'assistant', tool_calls: [{ id: 't', type: 'function', function: { name: 'f', arguments: LONG_TEXT } }] };
  assert.ok(await reserved(OPENAI, { model: 'gpt-4o', messages: [...messages, call] }) > 500);
  const items = [
    { role: 'user', content: 'weather?' },
    { type: 'reasoning', id: 'r', summary: [{ type: 'summary_text', text: 'look it up' }] },
    { type: 'function_call', call_id: 'c', name: 'weather', arguments: '{}' },
    { type: 'function_call_output', call_id: 'c', output: LONG_TEXT },
  ];
  const withInstructions = await reserved(RESPONSES, { model: 'gpt-4o', instructions: LONG_TEXT, input: items });
  assert.ok(withInstructions > 2 * countTokens(LONG_TEXT, 'gpt-4o'), 'the instructions and the tool output both count');
});

test('a 200 with no usage (not JSON, or JSON without one) settles as estimated, not refunding the output', async () => {
  for (const answer of [{ body: 'plain text answer', headers: { 'content-type': 'text/plain' } }, { body: '{"choices":[]}' }]) {
    const g = gov();
    const { sent, fetchImpl } = recording(g, [answer]);
    await (await governed(g, fetchImpl)(OPENAI, post({ model: 'gpt-4o', messages, max_tokens: 50 }))).text();
    assert.deepEqual(inUse(g), sent[0].reserved, answer.body);
    assert.equal(inUse(g).output, 50);
  }
});

test('each refused attempt (408, 409, 429, 5xx) is refunded; only the served one stays charged, as in Python', async () => {
  const g = gov();
  const refusals = [429, 500, 503, 408, 409].map((status) => ({ status, body: '{"error":{"message":"try again"}}' }));
  const { sent, fetchImpl } = recording(g, [...refusals, { body: JSON.stringify({ usage: { prompt_tokens: 7, completion_tokens: 3 } }) }]);
  const retry = new RetryPolicy({ maxRetries: 5, baseDelayMs: 0, maxDelayMs: 0 });
  const response = await governed(g, fetchImpl, { retry })(OPENAI, post({ model: 'gpt-4o', messages, max_tokens: 50 }));
  assert.equal(response.status, 200);
  assert.equal(sent.length, 6);
  assert.deepEqual(inUse(g), { input: 7, output: 3 });

  // Given up on: handed to the caller, refunded all the same.
  const last = gov();
  const refused = await governed(last, recording(last, [{ status: 503 }]).fetchImpl)(OPENAI, post({ model: 'gpt-4o', messages }));
  assert.equal(refused.status, 503);
  assert.deepEqual(inUse(last), { input: 0, output: 0 });
  assert.equal(last.livePermits(), 0);
});

test('governedFetch options are checked when it is made, each bad one named', () => {
  const g = gov();
  const bad = (options, field, value) => assert.throws(() => governedFetch(g, fetch, { paths: ['api'], ...options }), (e) => {
    assert.ok(e instanceof llmgov.InvalidRequestError, `${e?.name}: ${e?.message}`);
    assert.equal(e.field, field);
    assert.equal(e.value, value);
    return true;
  });
  bad({ includeUsages: true }, 'includeUsages', 'true');
  bad({ deadline: 5 }, 'deadline', '5');
  bad({ counting: 'exactly' }, 'counting', '"exactly"');
  for (const n of [0, -1, 1.5, '100', NaN]) bad({ defaultMaxOutputTokens: n }, 'defaultMaxOutputTokens', typeof n === 'string' ? `"${n}"` : String(n));
  for (const ms of [-1, NaN, '5']) bad({ deadlineMs: ms }, 'deadlineMs', typeof ms === 'string' ? `"${ms}"` : String(ms));
  bad({ onAttempt: 'log' }, 'onAttempt', '"log"');
  bad({ wait: 'no' }, 'wait', '"no"');
  bad({ klass: 5 }, 'klass', '5');
  bad({ paths: 'api' }, 'paths', '"api"');
  governedFetch(g, fetch, { paths: ['api'], counting: 'fast', defaultMaxOutputTokens: 1, deadlineMs: 0, onAttempt: () => {}, klass: undefined });
});
