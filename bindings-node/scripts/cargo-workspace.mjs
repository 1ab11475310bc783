#!/usr/bin/env node
// The `cargo` that `napi build` runs in `make test-node` (mk/node.mk sets
// CARGO to this file; @napi-rs/cli spawns $CARGO when it is set), so that the
// addon reuses what `cargo test --workspace --all-targets` compiled earlier
// in `make test` instead of compiling the core and its dependencies again.
//
// `napi build` (in bindings-node/) would run `cargo build --target <host
// triple>` for this crate alone, which shares no artifact with the workspace
// build, for two reasons:
//
// - an explicit `--target`, even the host's, puts every crate under
//   target/<triple>/debug/ rather than target/debug/;
// - building this package alone resolves the dependencies' features for
//   the addon alone, while the workspace build unifies them over every member
//   and dev-dependency (tokio with net/time/fs for the CLI, serde with
//   alloc, syn with visit/fold, regex-automata with dfa-build, …), so the
//   crates that differ — and every crate above them, the core included —
//   get other hashes.
//
// So for a debug build for the host this runs, without `--target`, `cargo
// build --workspace --lib --tests`: every package and a selection with test
// targets, hence the workspace build's feature resolution (dev-dependencies
// included); the test targets are fresh, and the libraries too but for the
// cdylibs `cargo test` never builds (this addon, which napi needs compiled
// anyway to collect its types, and the Python and C ones, a few seconds).
// (`--all-targets` would rebuild the examples, which `cargo build` makes
// in another mode than `cargo test`.) It runs cargo with the PATH make had
// (LLMGOV_CARGO_PATH), not npm's: pyo3's build script reruns, and pyo3 with
// every crate above it rebuilds, when PATH changes. Then it copies the addon
// to target/<triple>/debug/, where napi picks it up. Anything else (a release
// build, a cross build, `cargo metadata`) goes to cargo unchanged.
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';

/** The addon's library name ([lib] of Cargo.toml, dashes as underscores). */
const LIB = 'llmgov_node';

const args = process.argv.slice(2);
const env = { ...process.env };
delete env.CARGO; // cargo hands its own path to build scripts

function cargo(cargoArgs) {
  const run = spawnSync('cargo', cargoArgs, { stdio: 'inherit', env });
  if (run.error) throw run.error;
  return run.status ?? 1;
}

function hostTriple() {
  const rustc = spawnSync('rustc', ['-vV'], { encoding: 'utf8', env });
  return /^host: (\S+)$/m.exec(rustc.stdout ?? '')?.[1];
}

/** `args` without `flag` and its value; the value, if the flag was there. */
function take(list, flag) {
  const at = list.indexOf(flag);
  if (at < 0) return undefined;
  return list.splice(at, 2)[1];
}

function libraryFile() {
  if (process.platform === 'darwin') return `lib${LIB}.dylib`;
  if (process.platform === 'win32') return `${LIB}.dll`;
  return `lib${LIB}.so`;
}

function main() {
  const rest = [...args];
  const target = take(rest, '--target');
  const pkg = take(rest, '--package');
  const targetDir = env.CARGO_TARGET_DIR;
  const reusable =
    rest[0] === 'build' &&
    (pkg === undefined || pkg === 'llmgov-node') && // run from bindings-node/, no --package is this crate
    target !== undefined &&
    target === hostTriple() &&
    targetDir !== undefined &&
    !rest.some((a) => a === '--release' || a === '--profile' || a.startsWith('--profile=') || a === '--target-dir');
  if (!reusable) return cargo(args);
  if (env.LLMGOV_CARGO_PATH) env.PATH = env.LLMGOV_CARGO_PATH;
  const status = cargo([...rest, '--workspace', '--lib', '--tests']);
  if (status !== 0) return status;
  const out = join(targetDir, target, 'debug');
  mkdirSync(out, { recursive: true });
  copyFileSync(join(targetDir, 'debug', libraryFile()), join(out, libraryFile()));
  return 0;
}

process.exit(main());
