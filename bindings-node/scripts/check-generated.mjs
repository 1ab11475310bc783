// Builds the package (the addon, debug, into the shared cargo target dir;
// then the TypeScript layer) and fails if the build changed the committed
// files @napi-rs/cli generates (index.js, index.d.ts): they must be
// regenerated and committed with every change to the addon's API. Then
// type-checks test/types.ts against the published typings.
import { execSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const GENERATED = ['index.js', 'index.d.ts'];
const before = Object.fromEntries(GENERATED.map((f) => [f, readFileSync(join(root, f), 'utf8')]));

execSync('npm run build', { cwd: root, stdio: 'inherit' });

const changed = GENERATED.filter((f) => readFileSync(join(root, f), 'utf8') !== before[f]);
if (changed.length > 0) {
  console.error(`\nbindings-node: regenerating changed ${changed.join(', ')}; commit the regenerated files.`);
  try {
    execSync(`git --no-pager diff -- ${changed.join(' ')}`, { cwd: root, stdio: 'inherit' });
  } catch {
    // Not a git checkout: the file names above say enough.
  }
  process.exit(1);
}
execSync('npx tsc -p test/tsconfig.json', { cwd: root, stdio: 'inherit' });
console.log(`bindings-node: ${GENERATED.join(', ')} up to date; typings check`);
