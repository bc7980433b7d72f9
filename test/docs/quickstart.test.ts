// The library README's quick start, done as a new user does it: its commands run by bash in an
// empty directory, with whatever TypeScript and SDK the npm registry serves today (not this
// repository's pins) and the tsconfig.json `tsc --init` writes; its files pasted as they stand
// (every ```ts block the README names a file for, with the packages its ```sh blocks add for
// them); the server and the client run over stdio and over HTTP. Every block comes out of the
// README by its fence's info string (```sh setup, ```ts src/server.ts, …), so the README cannot
// drift from what runs. Only the clone's `npm ci` is not rerun: this repository is that clone.

import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { INSTALL_TIMEOUT_MS, START_TIMEOUT_MS } from '../../demo/processes/bounds.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const README = readFileSync(join(ROOT, 'packages', 'idempotency', 'README.md'), 'utf8');
const run = promisify(execFile);

/** The fenced blocks of the README, by info string (`sh setup`, `ts src/server.ts`, …). */
const blocks = new Map(
  [...README.matchAll(/^```([^\n`]+)\n([\s\S]*?)^```$/gm)].map(([, info = '', body = '']) => [info, body]),
);

/** The files the README names a block for (`ts src/server.ts`): every one goes in the project. */
const namedFiles = [...blocks.keys()].flatMap((info) => /^ts (\S+)$/.exec(info)?.[1] ?? []);

/** What the README installs beside the quick start for its other files (`sh v1`, `sh otel`). */
const EXTRA_INSTALLS = ['sh v1', 'sh otel'];

function block(info: string): string {
  const body = blocks.get(info);
  if (body === undefined) throw new Error(`the README has no \`\`\`${info} block`);
  return body;
}

/** Where the README says to put the clone's tarball. */
const CLONE_PLACEHOLDER = '/path/to/clone';

/** npm as a user's, but from its cache when it can, and quiet about audits and funding. */
const NPM_ENV = {
  ...process.env,
  npm_config_prefer_offline: 'true',
  npm_config_audit: 'false',
  npm_config_fund: 'false',
  npm_config_update_notifier: 'false',
};

let dir: string;
/** The project the README's `setup` block made: `payments`, inside `dir`. */
let project: string;
const servers: ChildProcess[] = [];

beforeAll(
  async () => {
    dir = await mkdtemp(join(tmpdir(), 'sep3182-quickstart-'));
    // The README's pack command, run where this clone is, its tarball put where the test can find it.
    const [, pack = ''] = /&& (npm pack -w mcp-request-idempotency)$/m.exec(block('sh pack')) ?? [];
    expect(pack).toBe('npm pack -w mcp-request-idempotency');
    const { stdout } = await run('bash', ['-c', `${pack} --pack-destination "$0" --json`, dir], {
      cwd: ROOT,
      env: NPM_ENV,
      timeout: INSTALL_TIMEOUT_MS,
    });
    const [{ filename = '' } = {}]: Array<{ filename?: string }> = JSON.parse(
      stdout.slice(stdout.indexOf('[')),
    );
    // The setup block installs the tarball by the name the pack made.
    expect(block('sh setup')).toContain(`${CLONE_PLACEHOLDER}/${filename}`);

    const setup = block('sh setup').replaceAll(CLONE_PLACEHOLDER, dir);
    await run('bash', ['-e', '-c', setup], { cwd: dir, env: NPM_ENV, timeout: INSTALL_TIMEOUT_MS });
    project = join(dir, 'payments');
    for (const install of EXTRA_INSTALLS)
      await run('bash', ['-e', '-c', block(install)], {
        cwd: project,
        env: NPM_ENV,
        timeout: INSTALL_TIMEOUT_MS,
      });
    await mkdir(join(project, 'src'));
    for (const file of namedFiles) await writeFile(join(project, file), block(`ts ${file}`));
  },
  INSTALL_TIMEOUT_MS * (2 + EXTRA_INSTALLS.length),
);

afterAll(async () => {
  for (const server of servers) server.kill('SIGKILL');
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** What the README's client prints: one lost attempt, in progress while the charge runs, then the answer and its replay. */
function expectOneChargeReplayed(stdout: string): void {
  const lines = stdout.trim().split('\n');
  expect(lines[0]).toBe('attempt 1: no answer');
  const rest = lines.slice(1);
  const answered = rest.findIndex((line) => !line.endsWith(': in progress'));
  expect(rest.slice(answered)).toEqual([
    `attempt ${answered + 2}: Charged 100. New balance: 100`,
    'replay: Charged 100. New balance: 100 (identical)',
  ]);
}

/** Runs the README's block `info` in the project: the client's retry replayed, the card charged once. */
async function runChargedOnce(info: string): Promise<string> {
  const { stdout, stderr } = await run('bash', ['-e', '-c', block(info)], {
    cwd: project,
    timeout: INSTALL_TIMEOUT_MS,
  });
  expectOneChargeReplayed(stdout);
  // The server's stderr reaches the terminal through the client: one charge, under one provider key.
  expect(stderr.trim().split('\n')).toEqual([expect.stringMatching(/^charging 100 under provider key mcp_/)]);
  return stdout;
}

describe("the library README's quick start, in a new project", () => {
  it('installs the registry’s current TypeScript, whose tsc --init it keeps but for the options it names', async () => {
    const installed = JSON.parse(
      await readFile(join(project, 'node_modules/typescript/package.json'), 'utf8'),
    );
    const latest = (await run('npm', ['view', 'typescript', 'version'], { env: NPM_ENV })).stdout.trim();
    expect(installed.version).toBe(latest);
    const tsconfig = await readFile(join(project, 'tsconfig.json'), 'utf8');
    expect(tsconfig).toMatch(/"strict": true/);
    expect(tsconfig).toMatch(/"verbatimModuleSyntax": true/);
  });

  it('names every file where the tsconfig it wrote compiles it: under src/', () => {
    expect(namedFiles).toContain('src/server-v1.ts');
    expect(namedFiles.filter((file) => !file.startsWith('src/'))).toStrictEqual([]);
  });

  it(
    'compiles every file the README names, with the tsconfig it wrote',
    async () => {
      const { stdout } = await run('npx', ['tsc', '--noEmit'], {
        cwd: project,
        timeout: INSTALL_TIMEOUT_MS,
      }).catch((error: { stdout: string }) => error);
      expect(stdout).toBe('');
    },
    INSTALL_TIMEOUT_MS,
  );

  it(
    "under tsc --init's own defaults, refuses only what the README turns off exactOptionalPropertyTypes for",
    async () => {
      const { stdout } = await run('npx', ['tsc', '--noEmit', '--exactOptionalPropertyTypes', 'true'], {
        cwd: project,
        timeout: INSTALL_TIMEOUT_MS,
      }).catch((error: { stdout: string }) => error);
      const errors = stdout.split('\n').filter((line) => /error TS\d+/.test(line));
      // The SDK's toNodeHandler refusing Node's request object in the HTTP branch of src/server.ts.
      expect(errors.length).toBeGreaterThan(0);
      for (const line of errors) expect(line).toMatch(/^src\/server\.ts\(\d+,\d+\): error TS2769:/);
    },
    INSTALL_TIMEOUT_MS,
  );

  it(
    "runs as written: tsc compiles every file, and the client's retry is answered from the record, charged once",
    async () => {
      const stdout = await runChargedOnce('sh run');
      // What the README shows is what it prints, but for how many attempts met the charge in
      // progress, which is the machine's speed, not the README's to promise.
      const attemptless = (text: string) => text.replace(/^attempt \d+:/gm, 'attempt N:');
      for (const line of [stdout.split('\n')[0] ?? '', ...stdout.trim().split('\n').slice(-2)])
        expect(attemptless(block('text'))).toContain(attemptless(line));
    },
    INSTALL_TIMEOUT_MS,
  );

  it(
    'runs the v1 server too, as its block says: the client on 2025-11-25 retries into the record, charged once',
    async () => {
      await runChargedOnce('sh v1-run');
    },
    INSTALL_TIMEOUT_MS,
  );

  it('runs over stateless HTTP too: the server with --http, the client given its URL', async () => {
    const server = spawn(process.execPath, ['dist/server.js', '--http'], {
      cwd: project,
      env: { ...process.env, PORT: '0' },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    servers.push(server);
    const charges: string[] = [];
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the server did not listen')), START_TIMEOUT_MS);
      server.once('exit', (code) => reject(new Error(`the server exited with ${code}`)));
      createInterface({ input: server.stderr }).on('line', (line) => {
        const listening = /"port":(\d+)/.exec(line);
        if (listening) {
          clearTimeout(timer);
          resolve(Number(listening[1]));
        } else charges.push(line);
      });
    });
    const { stdout } = await run(process.execPath, ['dist/client.js', `http://127.0.0.1:${port}/mcp`], {
      cwd: project,
      timeout: START_TIMEOUT_MS,
    });
    expectOneChargeReplayed(stdout);
    expect(charges).toEqual([expect.stringMatching(/^charging 100 under provider key mcp_/)]);
  });
});
