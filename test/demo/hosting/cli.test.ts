// The server's command line, run as a user runs it: `--help` answers with the usage; a mistake is
// refused with it.

import { execFile, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { START_TIMEOUT_MS } from '../../../demo/processes/bounds.js';

const ROOT = join(import.meta.dirname, '..', '..', '..');
/** A test runs the server once: its start-up, with room. */
const RUN_TIMEOUT_MS = 2 * START_TIMEOUT_MS;

type Run = { code: number | null; stdout: string; stderr: string };

/** `command` from the repository's root, with `env` added to the user's; stdin a pipe, not a terminal. */
function run(command: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<Run> {
  return new Promise((resolve) => {
    const options = { cwd: ROOT, env: { ...process.env, ...env }, timeout: START_TIMEOUT_MS };
    execFile(command, args, options, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === 'number' ? error.code : null) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/** `npm <args>`, as a user types it. */
const runNpm = (args: string[], env?: NodeJS.ProcessEnv) => run('npm', args, env);

const runServer = (...args: string[]) =>
  run(process.execPath, ['--import', 'tsx', join(ROOT, 'server.ts'), ...args]);

describe('the server command line', () => {
  test.concurrent.each(['--help', '-h'])(
    '%s prints the usage to stdout and exits 0',
    async (flag) => {
      const run = await runServer(flag);
      expect(run.code).toBe(0);
      expect(run.stdout).toMatch(
        /^Usage: npm start -- \[options\] {3}\(or node --import tsx server\.ts \[options\]\)\n/,
      );
      expect(run.stdout).toContain('--charge-latency-ms N');
      expect(run.stderr).toBe('');
    },
    RUN_TIMEOUT_MS,
  );

  test.concurrent(
    'a retention shorter than the provider keeps keys is refused on one line, naming both flags',
    async () => {
      const run = await runServer('--provider-url', 'http://127.0.0.1:9', '--retention-seconds', '60');
      expect(run.code).toBe(2);
      expect(run.stderr).toBe(
        '--retention-seconds 60 is shorter than the provider keeps keys (--provider-key-retention-seconds 86400): ' +
          'a key reused once its record is gone would be answered the old charge; keep records at least as long ' +
          '(--help lists the options)\n',
      );
    },
    RUN_TIMEOUT_MS,
  );

  test.concurrent(
    'an unknown option still exits 2, naming it, on one line that points to --help',
    async () => {
      const run = await runServer('--bogus');
      expect(run.code).toBe(2);
      expect(run.stderr).toBe("Unknown option '--bogus' (--help lists the options)\n");
      expect(run.stdout).toBe('');
    },
    RUN_TIMEOUT_MS,
  );
});

describe('npm start, as the README has a user run it', () => {
  test.concurrent(
    'npm start -- --help names npm start in its usage',
    async () => {
      const run = await runNpm(['start', '--', '--help']);
      expect(run.code).toBe(0);
      expect(run.stdout).toContain('\nUsage: npm start -- [options]');
    },
    RUN_TIMEOUT_MS,
  );

  test.concurrent(
    'a REDIS_URL without its scheme is refused naming the variable and its value, not a flag the user never gave',
    async () => {
      const run = await runNpm(['start', '--', '--http', '--port', '0', '--store', 'redis'], {
        REDIS_URL: 'localhost:6379',
      });
      expect(run.code).toBe(2);
      expect(run.stderr.split('\n')[0]).toBe(
        'REDIS_URL must be a redis:// or rediss:// URL, got "localhost:6379" (redis://localhost:6379?) (--help lists the options)',
      );
    },
    RUN_TIMEOUT_MS,
  );

  test.concurrent(
    'a URL with a password is refused without echoing the password',
    async () => {
      const run = await runServer('--store', 'redis', '--redis-url', 'user:s3cret@cache.internal:6379');
      expect(run.code).toBe(2);
      expect(run.stderr).toContain('got "…@cache.internal:6379"');
      expect(run.stderr).not.toContain('s3cret');
    },
    RUN_TIMEOUT_MS,
  );

  test.concurrent(
    'npm start at a terminal says on stderr that it serves MCP over stdio, and how to get HTTP or the options',
    async () => {
      // script(1) gives npm a pseudo-terminal, as a user's shell does; its output is the terminal's.
      const child = spawn('script', ['-qec', 'npm start', '/dev/null'], {
        cwd: ROOT,
        stdio: ['pipe', 'pipe', 'inherit'],
      });
      let output = '';
      const listening = new Promise<void>((resolve) =>
        child.stdout.on('data', (chunk: Buffer) => {
          output += chunk.toString('utf8');
          if (output.includes('"event":"listening"')) resolve();
        }),
      );
      const exited = new Promise((resolve) => child.once('exit', resolve));
      try {
        await listening;
      } finally {
        child.kill('SIGTERM');
        await exited;
      }
      const notice = output.indexOf('Serving MCP over stdio: this waits for JSON-RPC on stdin');
      expect(notice).toBeGreaterThan(-1);
      expect(output).toContain('Over HTTP: npm start -- --http; every option: npm start -- --help');
      expect(notice).toBeLessThan(output.indexOf('"event":"listening"'));
    },
    RUN_TIMEOUT_MS,
  );

  test.concurrent(
    'a server whose stdin is not a terminal says nothing of the kind',
    async () => {
      // Stdin at its end, not a terminal: the server starts, then stops, as when its client leaves.
      const argv = ['--import', 'tsx', join(ROOT, 'server.ts')];
      const child = spawn(process.execPath, argv, { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => {
        stderr += chunk.toString('utf8');
      });
      await new Promise((resolve) => child.once('exit', resolve));
      expect(stderr).toContain('"event":"listening"');
      expect(stderr).not.toContain('Serving MCP over stdio');
    },
    RUN_TIMEOUT_MS,
  );
});

describe('a start-up mistake', () => {
  // Each is refused with one line that names the flag or the URL and what to do: no usage, no
  // stack, no line per reconnect attempt. Port 1 on loopback: nothing listens there.
  const mistakes: Array<[string, string[], number, RegExp]> = [
    [
      'a port past 65535',
      ['--http', '--port', '99999'],
      2,
      /^--port must be an integer from 0 to 65535, got "99999"/,
    ],
    [
      'a negative number',
      ['--retention-seconds', '-5'],
      2,
      /^--retention-seconds must be an integer ≥ 1, got "-5"/,
    ],
    ['a malformed number', ['--max-records', '1e3'], 2, /^--max-records must be an integer ≥ 1, got "1e3"/],
    [
      'a metrics port past 65535',
      ['--metrics-port', '70000'],
      2,
      /^--metrics-port must be an integer from 0 to 65535, got "70000"/,
    ],
    [
      'a metrics port that is the MCP port',
      ['--http', '--port', '8080', '--metrics-port', '8080'],
      2,
      /^--metrics-port 8080 is the --port: give the metrics a port of their own/,
    ],
    [
      'a provider URL that is not http',
      ['--provider-url', 'ftp://127.0.0.1/'],
      2,
      /^--provider-url must be an http\(s\) URL/,
    ],
    [
      'a Redis URL that is not one',
      ['--store', 'redis', '--redis-url', 'localhost:6379'],
      2,
      /^--redis-url must be a redis:\/\/ or rediss:\/\/ URL, got "localhost:6379" \(redis:\/\/localhost:6379\?\)/,
    ],
    [
      'the SQLite store without its file',
      ['--store', 'sqlite'],
      2,
      /^--store sqlite needs --sqlite-path FILE/,
    ],
    [
      'a SQLite file for another store',
      ['--sqlite-path', 'records.sqlite'],
      2,
      /^--sqlite-path needs --store sqlite/,
    ],
    [
      'a durability SQLite does not offer here',
      ['--store', 'sqlite', '--sqlite-path', 'records.sqlite', '--sqlite-synchronous', 'off'],
      2,
      /^--sqlite-synchronous must be normal or full, got "off"/,
    ],
    [
      'an allowed host with a port',
      ['--http', '--allowed-hosts', 'mcp.example.test:443'],
      2,
      /^--allowed-hosts takes comma-separated host names without ports, got "mcp\.example\.test:443"/,
    ],
    ['allowed hosts over stdio', ['--allowed-hosts', 'mcp.example.test'], 2, /^--allowed-hosts needs --http/],
    ['a port over stdio', ['--port', '3008'], 2, /^--port needs --http \(--help lists the options\)/],
    [
      'a host over stdio, with no metrics',
      ['--host', '0.0.0.0'],
      2,
      /^--host needs --http or --metrics-port/,
    ],
    [
      'a Redis URL for the memory store',
      ['--redis-url', 'redis://127.0.0.1:6379'],
      2,
      /^--redis-url needs --store redis/,
    ],
    [
      'a Redis prefix for the memory store',
      ['--redis-prefix', 'a:'],
      2,
      /^--redis-prefix needs --store redis/,
    ],
    [
      'a Postgres prefix for the memory store',
      ['--postgres-prefix', 'a_'],
      2,
      /^--postgres-prefix needs --store postgres/,
    ],
    [
      'provider keys for the in-process ledger',
      ['--provider-keys', 'none'],
      2,
      /^--provider-keys needs --provider-url/,
    ],
    [
      'a provider timeout with no provider',
      ['--provider-timeout-ms', '5'],
      2,
      /^--provider-timeout-ms needs --provider-url/,
    ],
    [
      'a provider key retention with no provider',
      ['--provider-key-retention-seconds', '5'],
      2,
      /^--provider-key-retention-seconds needs --provider-url/,
    ],
    [
      'a SQLite file in a folder that is not there',
      ['--store', 'sqlite', '--sqlite-path', '/nonexistent-sep3182/records.sqlite'],
      1,
      /^server\.ts: cannot open \/nonexistent-sep3182\/records\.sqlite \(.+\): is its folder there, and may this process create files in it\? \(--sqlite-path\)/,
    ],
    [
      'a folder for a SQLite file',
      ['--store', 'sqlite', '--sqlite-path', ROOT],
      1,
      /^server\.ts: \/.+ is a folder: give the store the path of a file in it \(--sqlite-path\)/,
    ],
    [
      'a Redis that does not answer',
      ['--store', 'redis', '--redis-url', 'redis://127.0.0.1:1'],
      1,
      /^server\.ts: cannot reach Redis at redis:\/\/127\.0\.0\.1:1 \(connect ECONNREFUSED 127\.0\.0\.1:1\): start it, or give --redis-url/,
    ],
    [
      'a Postgres that does not answer, its password kept out of the log',
      ['--store', 'postgres', '--postgres-url', 'postgres://me:s3cret@127.0.0.1:1/db'],
      1,
      /^server\.ts: cannot reach Postgres at postgres:\/\/me:\*\*\*@127\.0\.0\.1:1\/db \(connect ECONNREFUSED 127\.0\.0\.1:1\): start it, or give --postgres-url/,
    ],
  ];
  test.concurrent.each(mistakes)(
    '%s: refused on one line',
    async (_name, args, code, line) => {
      const run = await runServer(...args);
      expect(run.code).toBe(code);
      expect(run.stderr).toMatch(line);
      expect(run.stderr.trimEnd().split('\n')).toHaveLength(1);
      expect(run.stdout).toBe('');
    },
    RUN_TIMEOUT_MS,
  );

  test.concurrent(
    'a --sqlite-path that is no SQLite database: one line saying so, exit 1, and the file left as it was',
    async () => {
      const dir = await mkdtemp(join(tmpdir(), 'sep3182-not-a-database-'));
      const notes = join(dir, 'notes.txt');
      const text = 'my notes, not a database\n'.repeat(200);
      await writeFile(notes, text);
      try {
        const run = await runServer('--store', 'sqlite', '--sqlite-path', notes);
        expect(run.code).toBe(1);
        expect(run.stderr).toBe(
          `server.ts: ${notes} is not a SQLite database (file is not a database): give the store a file of its own (--sqlite-path)\n`,
        );
        expect(await readFile(notes, 'utf8')).toBe(text);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
    RUN_TIMEOUT_MS,
  );

  test.concurrent.each([
    ['--port', 'cannot listen on', 'give another --host or --port'],
    ['--metrics-port', 'cannot serve metrics on', 'give another --metrics-port'],
  ])(
    'a %s already taken: one line naming it, exit 1',
    async (flag, refused, what) => {
      const taken = createServer();
      await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
      const address = taken.address();
      if (address === null || typeof address === 'string') throw new Error('no TCP port from the OS');
      const { port } = address;
      try {
        const run = await runServer('--http', flag, String(port));
        expect(run.code).toBe(1);
        expect(run.stderr).toMatch(
          new RegExp(`^server\\.ts: ${refused} 127\\.0\\.0\\.1:${port} \\(listen EADDRINUSE.*\\): ${what}`),
        );
        expect(run.stderr.trimEnd().split('\n')).toHaveLength(1);
      } finally {
        taken.close();
      }
    },
    RUN_TIMEOUT_MS,
  );
});
