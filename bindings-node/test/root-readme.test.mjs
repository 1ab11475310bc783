// The repository README's Node quick start, run as a reader runs it: the
// block saved inside the package (so that `import 'llmgov'` resolves to it)
// and run by node against `llmgov mock-server`, whose address it reads from
// OPENAI_BASE_URL as the README says.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { startMock } from './helpers/mock-server.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const repo = join(root, '..');

function quickStart() {
  const readme = readFileSync(join(repo, 'README.md'), 'utf8');
  const section = readme.split('## Quick start (Node)')[1] ?? '';
  const block = /```js\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(block, 'README.md has a Node quick start');
  return block;
}

let mock;
before(async () => {
  mock = await startMock(readFileSync(join(repo, 'cli', 'mock', 'openai-tier1.toml'), 'utf8'));
});
after(async () => {
  await mock?.stop();
});

test('the quick start says how to install what it imports', () => {
  assert.match(quickStart(), /npm install \/path\/to\/llmgov\/bindings-node openai/);
});

test("the repository README's Node quick start answers through the mock server", () => {
  const file = join(root, 'examples', '.root-readme-quickstart.mjs');
  writeFileSync(file, quickStart());
  const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith('OPENAI_')));
  try {
    const out = execFileSync(process.execPath, [file], {
      cwd: root,
      encoding: 'utf8',
      env: { ...env, OPENAI_BASE_URL: `${mock.url}/v1` },
      timeout: 60_000,
    });
    // The answer came from the mock through governedFetch, which settled it.
    assert.match(out, /^\d+ tokens: \S/m, out);
  } finally {
    rmSync(file);
  }
});
