// The demo never turns a backend failure into a skip. A redis-server and PostgreSQL binaries that
// are installed but fail at once (stand-ins on PATH, ahead of any real ones) fail `npm run demo`
// with their own errors; a Redis that is not installed fails `--scale`, which has nothing else to
// show. `--scale` runs only the scenarios that need a backend (9–11 on Redis, 16 on Postgres).
// The default demo, the SEP's own story, needs none of them.

import { execFile } from 'node:child_process';
import { chmod, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { START_TIMEOUT_MS } from '../../demo/processes/bounds.js';

const ROOT = join(import.meta.dirname, '..', '..');

let dir: string;
/** A PATH directory holding node alone. */
let nodeOnly: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sep3182-broken-backends-'));
  await chmod(dir, 0o755); // run as root, the Postgres helper runs initdb as the postgres user
  const failing = (tool: string, message: string) =>
    writeFile(join(dir, tool), `#!/bin/sh\necho "${message}" >&2\nexit 1\n`).then(() =>
      chmod(join(dir, tool), 0o755),
    );
  await failing('redis-server', 'stand-in redis-server: cannot start');
  await failing('initdb', 'stand-in initdb: cannot start');
  await failing('pg_ctl', 'stand-in pg_ctl: cannot start');
  nodeOnly = join(dir, 'node-only');
  await mkdir(nodeOnly);
  await symlink(process.execPath, join(nodeOnly, 'node'));
});

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

function demo(path: string, args = ['--scale']): Promise<{ code: number | null; stdout: string }> {
  const { REDIS_URL: _redis, DATABASE_URL: _postgres, CI: _ci, ...env } = process.env;
  const argv = ['--import', 'tsx', join(ROOT, 'client-demo.ts'), ...args];
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      argv,
      { cwd: ROOT, env: { ...env, PATH: path }, timeout: START_TIMEOUT_MS * 2 },
      (error, stdout) => {
        const code = error ? (typeof error.code === 'number' ? error.code : null) : 0;
        resolve({ code, stdout });
      },
    );
  });
}

describe('the demo, when a backend is installed but does not start', () => {
  it(
    'fails, printing what redis-server and initdb said, and calls neither a skip',
    async () => {
      const { code, stdout } = await demo([dir, process.env.PATH].join(delimiter));
      expect(code).toBe(1);
      expect(stdout).toContain('stand-in redis-server: cannot start');
      expect(stdout).toContain('stand-in initdb: cannot start');
      expect(stdout).not.toMatch(/skipped|not installed/);
      expect(stdout).toMatch(/✗ +Scenarios 9–11 \(scale-out on Redis\) +the backend they need started/);
      expect(stdout).toMatch(/✗ +Scenario 16 \(Postgres\) +the backend they need started/);
    },
    START_TIMEOUT_MS * 2,
  );
});

describe('the demo, when Redis is not installed', () => {
  it(
    'fails --scale, which runs only the scenarios that need it, saying so on one line',
    async () => {
      // PATH with node and nothing else: no redis-server on it, and REDIS_URL unset.
      const { code, stdout } = await demo(nodeOnly);
      expect(code).toBe(1);
      expect(stdout).toContain(
        '== Scenarios 9–11 (scale-out on Redis): skipped, no redis-server is installed and REDIS_URL is unset.',
      );
      expect(stdout).toMatch(
        /✗ +Scenarios 9–11 \(scale-out on Redis\) +ran \(every scenario must run here\)/,
      );
    },
    START_TIMEOUT_MS * 2,
  );
});

describe('the default demo, on a machine with no backend installed', () => {
  it(
    "tells the SEP's story alone (scenarios 0 to 7), says what it starts first, and ends naming the full tour",
    async () => {
      const { code, stdout } = await demo(nodeOnly, []);
      expect(code).toBe(0);
      const lines = stdout.split('\n');
      // The first line names what the story shows; scenario 0 shows it as the wire carried it.
      expect(lines[0]).toMatch(
        /^SEP-3182 request idempotency: a server that declares capabilities\.tools\.idempotency /,
      );
      expect(lines).toContain(
        `  server/discover's capabilities.tools, as the transport received it: {"listChanged":true,"idempotency":{}}`,
      );
      // An expectation's line says what it saw, not the whole trace the lines above it told.
      expect(lines.filter((line) => /^ {2}✓ .*→/.test(line))).toStrictEqual([]);
      const logged = lines.findIndex((line) =>
        line.startsWith("  the server's decisions for the key, as logged:"),
      );
      expect(lines[logged]).toMatch(/inProgress, .*executed, replayed$/);
      expect(lines[logged + 1]).toContain("each is logged as its request is answered: request 1's executed");
      const starting = stdout.indexOf('Starting server.ts three times on the memory store');
      expect(starting).toBeGreaterThan(-1);
      expect(starting).toBeLessThan(stdout.indexOf('== Scenario 0: discovery'));
      expect(stdout).toContain('== Scenario 7: a broken response stream');
      expect(stdout).not.toContain('== Scenario 8');
      expect(stdout).toMatch(/All 20 expectations held, in \d+ s\.\n/);
      expect(stdout.trimEnd().split('\n').at(-1)).toMatch(/^Scenarios 8 to 19 \(.*\): npm run demo:all$/);
    },
    START_TIMEOUT_MS * 2,
  );
});
