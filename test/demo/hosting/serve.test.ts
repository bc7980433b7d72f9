// What a server loads for its transport: a client starts a stdio server for each session, so a
// stdio server loads no HTTP stack (Express, the SDK's HTTP entry); an HTTP server loads it.
// The probe reads the CommonJS modules loaded: Express, CommonJS, stands for the stack.
// The probe reads the CommonJS modules loaded, so Express (CommonJS) stands for the stack.

import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { START_TIMEOUT_MS, waitUntil } from '../../../demo/processes/bounds.js';
import { ROOT } from '../../../demo/processes/launch.js';
import { tempFolder } from '../../support/temp-folder.js';

const folder = tempFolder('serve');

/** Loaded before the server: at its exit, writes the CommonJS modules loaded to LOADED_FILE. */
const PROBE = `data:text/javascript,${encodeURIComponent(`
  import { writeFileSync } from 'node:fs';
  import { createRequire } from 'node:module';
  const cache = createRequire(process.cwd() + '/').cache;
  process.on('exit', () => writeFileSync(process.env.LOADED_FILE, JSON.stringify(Object.keys(cache))));
`)}`;

/** Starts server.ts with `args`, stops it once `stop` allows, and resolves to what it loaded. */
async function modulesLoaded(
  args: string[],
  stop: (child: ChildProcess, stderr: () => string) => Promise<void>,
) {
  const file = join(folder.dir, `${args.length}-loaded.json`);
  const child = spawn(process.execPath, ['--import', 'tsx', '--import', PROBE, 'server.ts', ...args], {
    cwd: ROOT,
    env: { ...process.env, LOADED_FILE: file },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  child.stdout.resume();
  try {
    const exited = once(child, 'exit');
    await stop(child, () => stderr);
    expect((await exited)[0]).toBe(0);
    const loaded: string[] = JSON.parse(await readFile(file, 'utf8'));
    return (name: string) => loaded.some((path) => path.includes(`/node_modules/${name}/`));
  } finally {
    child.kill('SIGKILL');
  }
}

describe('the modules a server loads', () => {
  it(
    'over stdio: no Express',
    async () => {
      // stdin closed at once: the server starts, then stops as a client's hang-up stops it.
      const loaded = await modulesLoaded([], async (child) => void child.stdin?.end());
      // The probe sees what the server does load through require: the telemetry API.
      expect(loaded('@opentelemetry/api')).toBe(true);
      expect(loaded('express')).toBe(false);
    },
    2 * START_TIMEOUT_MS,
  );

  it(
    'over HTTP: Express',
    async () => {
      const loaded = await modulesLoaded(['--http', '--port', '0'], async (child, stderr) => {
        await waitUntil(async () => stderr().includes('"event":"listening"'), START_TIMEOUT_MS);
        child.kill('SIGTERM');
      });
      expect(loaded('express')).toBe(true);
    },
    2 * START_TIMEOUT_MS,
  );
});
