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
// Markdown table: per round trip, the median over 7 rounds of the CPU time
// the process spent (user + system: what the round trip costs, even on a
// machine shared with other work) and of the wall time (which also counts
// timers a peer waits on, and time the process was descheduled), and the
// CPU-time ratio to llmgov's tryAcquire + settle. Run with `npm run bench`
// (release build first).
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

/** CPU (user + system) and wall nanoseconds since `start`. */
function elapsed(start) {
  const cpu = process.cpuUsage(start.cpu);
  return { cpu: (cpu.user + cpu.system) * 1000, wall: Number(process.hrtime.bigint() - start.wall) };
}
const now = () => ({ cpu: process.cpuUsage(), wall: process.hrtime.bigint() });

/** `{ cpu, wall }` ns per call, medians over rounds of `n` calls; the first round warms up. */
function summarize(rounds, n) {
  return { cpu: median(rounds.map((r) => r.cpu)) / n, wall: median(rounds.map((r) => r.wall)) / n };
}

function measureSync(n, body) {
  const rounds = [];
  for (let r = 0; r < ROUNDS + 1; r++) {
    const start = now();
    for (let i = 0; i < n; i++) body();
    if (r > 0) rounds.push(elapsed(start));
  }
  return summarize(rounds, n);
}

async function measureAsync(n, body) {
  const rounds = [];
  for (let r = 0; r < ROUNDS + 1; r++) {
    const start = now();
    for (let i = 0; i < n; i++) await body();
    if (r > 0) rounds.push(elapsed(start));
  }
  return summarize(rounds, n);
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

const base = results[0][1].cpu;
let cpu = os.cpus()[0]?.model ?? 'unknown';
try {
  cpu = execSync("lscpu | sed -n 's/^Model name: *//p'", { encoding: 'utf8' }).trim() || cpu;
} catch {
  // lscpu missing: the model from Node will do.
}
console.log(`Node ${process.version}, ${cpu}, ${os.cpus().length} CPUs, ${new Date().toISOString().slice(0, 10)}`);
console.log('');
console.log(`load average at the end: ${os.loadavg().map((l) => l.toFixed(1)).join(', ')}`);
console.log('');
console.log('| round trip | CPU ns | wall ns | CPU × llmgov tryAcquire + settle |');
console.log('|---|---:|---:|---:|');
for (const [name, t] of results) {
  console.log(`| ${name} | ${t.cpu.toFixed(0)} | ${t.wall.toFixed(0)} | ${(t.cpu / base).toFixed(2)} |`);
}
