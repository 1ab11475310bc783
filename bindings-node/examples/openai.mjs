// The official OpenAI SDK, governed with one line. Against the mock server:
//
//   cargo run -p llmgov-cli -- mock-server --config cli/mock/openai-tier1.toml --port 8080 &
//   OPENAI_BASE_URL=http://127.0.0.1:8080/v1 node examples/openai.mjs
//
// Twelve concurrent requests wait their turn in the governor; none is
// refused by the provider. gpt-4o at tier 1 allows 500 requests and 30,000
// tokens a minute, and OpenAI also enforces the requests pro rata over
// seconds (as the mock does with `enforce_every = "1s"`: about 8 a second).
// This config spreads the tokens too, 500 a second, so that one burst never
// spends the minute's tokens at once. The governor keeps 20% of each limit
// back, so that requests admitted together but sent a little apart (a busy
// event loop) still fit the provider's window.
import OpenAI from 'openai';
import llmgov from 'llmgov';

const { Governor, governedFetch } = llmgov;

const gov = Governor.fromToml(`
[scopes."openai/org/gpt-4o"]
provider = true
safety_margin = 0.8
limits = [
  { dimension = "requests", amount = 500, window = "1m" },
  { dimension = "tokens", amount = 30000, window = "1m" },
  { dimension = "tokens", amount = 500, window = "1s" },
]
`);
const openai = new OpenAI({
  apiKey: process.env.OPENAI_API_KEY ?? 'sk-mock',
  baseURL: process.env.OPENAI_BASE_URL ?? 'http://127.0.0.1:8080/v1',
  maxRetries: 0, // one layer retries: governedFetch, after the provider's advice
  fetch: governedFetch(gov, fetch, { paths: ['openai/org/gpt-4o'], includeUsage: true }),
});

const answers = await Promise.all(
  Array.from({ length: 12 }, (_, i) =>
    openai.chat.completions.create({
      model: 'gpt-4o',
      messages: [{ role: 'user', content: `Give me fact number ${i} about rate limits.` }],
      max_tokens: 100,
    }),
  ),
);
const tokens = answers.reduce((sum, a) => sum + a.usage.total_tokens, 0);
const s = gov.snapshot();
console.log(`${answers.length} answers, ${tokens} tokens; admitted ${s.admitted}, provider 429s ${s.admittedThenProviderRejected}`);
