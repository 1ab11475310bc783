// npm's `prepare` hook: builds the package (the addon, then the TypeScript
// layer). Inside bindings-node (`npm install`) the devDependencies are
// already installed. When another project installs the folder
// (`npm install ./bindings-node`), npm links it without installing them, so
// they are installed here first, from package-lock.json.
import { execSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const run = (command) => execSync(command, { cwd: root, stdio: 'inherit' });

if (!existsSync(join(root, 'node_modules', '@napi-rs', 'cli')) || !existsSync(join(root, 'node_modules', 'typescript'))) {
  run('npm ci --ignore-scripts --no-audit --no-fund');
}
run('npm run build');
