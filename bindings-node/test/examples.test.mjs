// The README's quick start and the examples run as a user runs them.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { llmgovBinary, startMock } from './helpers/mock-server.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const run = (file, env = {}) =>
  execFileSync(process.execPath, [file], { cwd: root, encoding: 'utf8', env: { ...process.env, ...env }, timeout: 60_000 });

test("the README's quick start runs", () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const block = /```js\n([\s\S]*?)```/.exec(readme)?.[1];
  assert.ok(block, 'README.md has a ```js quick start');
  // Inside the package, so that `import 'llmgov'` resolves to it.
  const file = join(root, 'examples', '.readme-quickstart.mjs');
  writeFileSync(file, block);
  try {
    const out = run(file);
    assert.match(out, /tenants\/acme is out of tokens; retry after \d+ ms/);
    assert.match(out, /admitted 2 requests/);
  } finally {
    rmSync(file);
  }
});

const ROUTING_OUTPUT = [
  /^gpt-4o → openai\/org$/m,
  /^gpt-4o → azure\/eastus$/m,
  /^refused: rate_limited on openai\/org$/m,
  /^llmgov_admitted_total 2$/m,
  /^event: \{"event":"denied","code":"rate_limited","dimension":"tokens","klass":"","retryAfterMs":\d+,"scope":"openai\/org"\}$/m,
];

test("the README's routing, metrics and events example runs", () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const section = readme.split('## Routing, metrics and events')[1] ?? '';
  const block = /```js\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(block, 'README.md has a routing example');
  const file = join(root, 'examples', '.readme-routing.mjs');
  writeFileSync(file, block);
  try {
    const out = run(file);
    for (const line of ROUTING_OUTPUT) assert.match(out, line);
  } finally {
    rmSync(file);
  }
});

test("the README's metrics example runs, and llmgov top draws the file it wrote", () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const section = readme.split('## Metrics and `llmgov top`')[1] ?? '';
  const block = /```js\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(block, 'README.md has a metrics example');
  const file = join(root, 'examples', '.readme-metrics.mjs');
  writeFileSync(file, block);
  let metricsFile;
  try {
    const out = run(file);
    assert.match(out, /^tokens admitted_then_provider_rejected 1$/m);
    assert.match(out, /^retry amplification 1$/m, 'no success yet');
    metricsFile = /^llmgov top (\S+)$/m.exec(out)?.[1];
    assert.ok(metricsFile, out);
    const top = execFileSync(llmgovBinary(), ['top', metricsFile, '--once'], { encoding: 'utf8', timeout: 30_000 });
    // AIMD lowered it after the 429 (a real clock: the figures move).
    assert.match(top, /^openai\/org +tokens +1m +\d+ \/ \d+ .*\(configured 10000\)$/m, top);
    assert.match(top, /^tenants\/acme +concurrency +- +0 \/ 4 /m, top);
    assert.match(top, /by the provider: tokens 1 {2}retry amplification 1\.00/, top);
  } finally {
    rmSync(file);
    if (metricsFile) rmSync(metricsFile, { force: true });
  }
});

test('examples/routing.mjs runs', () => {
  const out = run(join(root, 'examples', 'routing.mjs'));
  for (const line of ROUTING_OUTPUT) assert.match(out, line);
});

// The repository README's Node quick start needs the mock server: test/root-readme.test.mjs runs it.

test('examples/quickstart.mjs runs', () => {
  assert.match(run(join(root, 'examples', 'quickstart.mjs')), /admitted 2 requests/);
});

let mock;
before(async () => {
  mock = await startMock(readFileSync(join(root, '..', 'cli', 'mock', 'openai-tier1.toml'), 'utf8'));
});
after(async () => {
  await mock?.stop();
});

test('examples/openai.mjs governs the OpenAI SDK against the mock server', () => {
  const out = run(join(root, 'examples', 'openai.mjs'), { OPENAI_BASE_URL: `${mock.url}/v1` });
  assert.match(out, /^12 answers, \d+ tokens; admitted 12, provider 429s 0$/m);
});
