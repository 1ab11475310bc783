// The admission round trip from Node, llmgov against the peers, in one run:
//
//   llmgov tryAcquire + settle   (sync; route resolved once)
//   llmgov await acquire + settle (the Promise API, admitted at once)
//   p-limit     await limit(fn)
//   p-queue     await queue.add(fn)   (interval-capped: a rate limiter)
//   bottleneck  await limiter.schedule(fn) (reservoir: a rate limiter)
//
// Each peer is configured so that nothing waits: the figure is the cost of
// asking and giving back, which is what every request pays. Prints a
// Markdown table (median of 7 rounds, ns per round trip, ratio to llmgov's
// tryAcquire + settle). Run with `npm run bench` (release build first).
import { execSync } from 'node:child_process';
import os from 'node:os';

import Bottleneck from 'bottleneck';
import pLimit from 'p-limit';
import PQueue from 'p-queue';

import llmgov from '../dist/index.js';

const { Governor } = llmgov;
const ROUNDS = 7;

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

/** ns per call of `body` (sync), median over rounds of `n` calls. */
function measureSync(n, body) {
  const rounds = [];
  for (let r = 0; r < ROUNDS + 1; r++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < n; i++) body();
    const ns = Number(process.hrtime.bigint() - start) / n;
    if (r > 0) rounds.push(ns); // the first round warms up
  }
  return median(rounds);
}

/** ns per awaited call of `body`, median over rounds of `n` sequential calls. */
async function measureAsync(n, body) {
  const rounds = [];
  for (let r = 0; r < ROUNDS + 1; r++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < n; i++) await body();
    const ns = Number(process.hrtime.bigint() - start) / n;
    if (r > 0) rounds.push(ns);
  }
  return median(rounds);
}

const CONFIG = `
[scopes."openai/org/gpt-4o"]
limits = [
  { dimension = "requests", amount = 1000000000, window = "1s" },
  { dimension = "tokens", amount = 1000000000000, window = "1s" },
]
[scopes."tenants/*"]
limits = [{ dimension = "tokens", amount = 1000000000000, window = "1s" }]
`;

const results = [];

{
  const gov = Governor.fromToml(CONFIG);
  const route = gov.route(['openai/org/gpt-4o']);
  const request = { route, inputTokens: 1200, maxOutputTokens: 300 };
  const usage = { inputTokens: 1180, outputTokens: 212 };
  const ns = measureSync(1_000_000, () => gov.tryAcquire(request).settle(usage));
  results.push(['llmgov `tryAcquire` + `settle` (1 scope × 2 limits)', ns]);

  const two = gov.route(['tenants/acme', 'openai/org/gpt-4o']);
  const request2 = { route: two, inputTokens: 1200, maxOutputTokens: 300 };
  results.push(['llmgov `tryAcquire` + `settle` (2 scopes × 3 limits)', measureSync(1_000_000, () => gov.tryAcquire(request2).settle(usage))]);

  const byPaths = { paths: ['openai/org/gpt-4o'], inputTokens: 1200, maxOutputTokens: 300 };
  results.push(['llmgov `tryAcquire({ paths })` + `settle` (cached route)', measureSync(1_000_000, () => gov.tryAcquire(byPaths).settle(usage))]);

  results.push(["llmgov `await acquire` + `settle`", await measureAsync(200_000, async () => (await gov.acquire(request)).settle(usage))]);
}

{
  const limit = pLimit(1_000_000);
  const task = () => undefined;
  results.push(['p-limit `await limit(fn)`', await measureAsync(200_000, () => limit(task))]);
}

{
  const queue = new PQueue({ concurrency: Infinity, intervalCap: 1_000_000_000, interval: 1000 });
  const task = () => undefined;
  results.push(['p-queue `await queue.add(fn)` (interval-capped)', await measureAsync(20_000, () => queue.add(task))]);
}

{
  const limiter = new Bottleneck({ reservoir: 1_000_000_000, maxConcurrent: null, minTime: 0 });
  const task = () => Promise.resolve();
  results.push(['bottleneck `await schedule(fn)` (reservoir)', await measureAsync(2_000, () => limiter.schedule(task))]);
}

const base = results[0][1];
let cpu = os.cpus()[0]?.model ?? 'unknown';
try {
  cpu = execSync("lscpu | sed -n 's/^Model name: *//p'", { encoding: 'utf8' }).trim() || cpu;
} catch {
  // lscpu missing: the model from Node will do.
}
console.log(`Node ${process.version}, ${cpu}, ${os.cpus().length} CPUs, ${new Date().toISOString().slice(0, 10)}`);
console.log('');
console.log('| round trip | ns | × llmgov tryAcquire + settle |');
console.log('|---|---:|---:|');
for (const [name, ns] of results) console.log(`| ${name} | ${ns.toFixed(0)} | ${(ns / base).toFixed(2)} |`);
