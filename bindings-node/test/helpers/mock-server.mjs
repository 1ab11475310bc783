// Starts `llmgov mock-server` (the binary `cargo build -p llmgov-cli` or
// `cargo test --workspace` leaves in the shared target dir) on a free port.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** The llmgov binary: $LLMGOV_BIN, else $CARGO_TARGET_DIR/debug/llmgov, else target/debug/llmgov. */
export function llmgovBinary() {
  if (process.env.LLMGOV_BIN) return process.env.LLMGOV_BIN;
  const target = process.env.CARGO_TARGET_DIR ? resolve(REPO, process.env.CARGO_TARGET_DIR) : join(REPO, 'target');
  const binary = join(target, 'debug', 'llmgov');
  if (!existsSync(binary)) {
    throw new Error(`${binary} not found: build it with \`cargo build -p llmgov-cli\` (make test does)`);
  }
  return binary;
}

/** Starts the mock with `toml`; resolves to `{ url, stop() }` once it listens. */
export async function startMock(toml) {
  const dir = mkdtempSync(join(tmpdir(), 'llmgov-mock-'));
  const config = join(dir, 'mock.toml');
  writeFileSync(config, toml);
  const child = spawn(llmgovBinary(), ['mock-server', '--config', config, '--port', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const url = await new Promise((resolveUrl, reject) => {
    const lines = createInterface({ input: child.stdout });
    const timer = setTimeout(() => reject(new Error(`mock-server did not start in 10 s: ${stderr}`)), 10_000);
    lines.once('line', (line) => {
      clearTimeout(timer);
      const match = /listening on (http:\/\/\S+)/.exec(line);
      if (match) resolveUrl(match[1]);
      else reject(new Error(`unexpected first line from mock-server: ${line}`));
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`mock-server exited with ${code}: ${stderr}`));
    });
  });
  return {
    url,
    stop: () =>
      new Promise((done) => {
        if (child.exitCode !== null) return done();
        child.once('exit', () => done());
        child.kill('SIGTERM');
      }),
  };
}
