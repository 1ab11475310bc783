// One worker process of test/redis.test.mjs's multi-process test: builds a
// RedisGovernor on the shared prefix, waits for the common start time, tries
// `attempts` acquires of one request each (settled at once), gives its
// lease back, and prints how many were admitted.
// Usage: node redis-worker.mjs CONFIG_TOML START_EPOCH_MS ATTEMPTS
import llmgov from '../../dist/index.js';

const { RedisGovernor, RateLimitedError } = llmgov;
const [config, start, attempts] = process.argv.slice(2);

const gov = RedisGovernor.fromToml(config);
const route = gov.route(['openai/org/gpt-4o']);
await new Promise((resolve) => setTimeout(resolve, Math.max(0, Number(start) - Date.now())));
let admitted = 0;
for (let i = 0; i < Number(attempts); i++) {
  try {
    await (await gov.tryAcquire({ route, inputTokens: 1 })).settle();
    admitted++;
  } catch (error) {
    if (!(error instanceof RateLimitedError)) throw error;
  }
}
await gov.returnLeases();
const { fallbackAdmissions } = gov.health();
console.log(JSON.stringify({ admitted, fallbackAdmissions }));
