// The packages as a user gets them: `npm pack` both, install the tarballs into an empty project
// beside the registry's SDK packages, and run what their READMEs tell a user to paste. The
// library README's snippets are read out of the README itself, so it cannot drift from what runs.

import { execFile, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { callTool, LEGACY_PROTOCOL_VERSION, MODERN_PROTOCOL_VERSION } from 'mcp-request-idempotency/client';
import { publint } from 'publint';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Era, newClient } from '../../demo/processes/launch.js';
import { textOf } from '../support/sep-cases.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const run = promisify(execFile);
/** Installing from the npm registry (or its cache) and compiling take a while on a cold machine. */
const INSTALL_TIMEOUT_MS = 240_000;

const rootPackage = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
/** The consumer installs the versions this repository is tested with, so nothing drifts. */
const pinned = (name: string): string =>
  `${name}@${rootPackage.dependencies[name] ?? rootPackage.devDependencies[name]}`;

/** The fenced ```ts <file> blocks of a README (the quick start's under src/), by file name. */
function snippetsOf(readme: string): Map<string, string> {
  const snippets = new Map<string, string>();
  for (const match of readme.matchAll(/^```ts (?:src\/)?([\w.-]+\.ts)\n([\s\S]*?)^```$/gm)) {
    const [, file, code] = match;
    if (file && code) snippets.set(file, code);
  }
  return snippets;
}

interface Packed {
  filename: string;
  files: Array<{ path: string }>;
}

let dir: string;
let consumer: string;
let library: Packed;
let checker: Packed;
/** What tsc said of the snippets: nothing, if they type-check. It emits either way. */
let typeErrors: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sep3182-package-'));
  const { stdout } = await run(
    'npm',
    [
      'pack',
      '--json',
      '--pack-destination',
      dir,
      '-w',
      'mcp-request-idempotency',
      '-w',
      'mcp-idempotency-checker',
    ],
    { cwd: ROOT, timeout: INSTALL_TIMEOUT_MS },
  );
  const packed: Packed[] = JSON.parse(stdout.slice(stdout.indexOf('[')));
  [library, checker] = ['mcp-request-idempotency', 'mcp-idempotency-checker'].map((name) => {
    const found = packed.find((p) => p.filename.startsWith(name));
    if (!found) throw new Error(`npm pack made no tarball for ${name}`);
    return found;
  }) as [Packed, Packed];

  consumer = join(dir, 'consumer');
  await mkdir(consumer);
  await writeFile(
    join(consumer, 'package.json'),
    JSON.stringify({ name: 'consumer', private: true, type: 'module' }),
  );
  const peers = [
    '@modelcontextprotocol/server',
    '@modelcontextprotocol/client',
    '@modelcontextprotocol/node',
    '@modelcontextprotocol/sdk',
    '@opentelemetry/api',
    '@opentelemetry/sdk-metrics',
    '@opentelemetry/exporter-prometheus',
    '@redis/client',
    'pg',
    '@types/pg',
    'zod',
    'typescript',
    '@types/node',
  ].map(pinned);
  await run(
    'npm',
    [
      'install',
      '--no-audit',
      '--no-fund',
      '--prefer-offline',
      join(dir, library.filename),
      join(dir, checker.filename),
      ...peers,
    ],
    { cwd: consumer, timeout: INSTALL_TIMEOUT_MS },
  );

  // The README's two servers, and each without its guard: the SDK's bare server.
  const snippets = snippetsOf(readFileSync(join(ROOT, 'packages', 'idempotency', 'README.md'), 'utf8'));
  await mkdir(join(consumer, 'src'));
  for (const [file, code] of snippets) {
    await writeFile(join(consumer, 'src', file), code);
    const bare = code
      .split('\n')
      .filter((line) => !line.includes('installIdempotencyGuard(server'))
      .join('\n');
    await writeFile(join(consumer, 'src', `bare-${file}`), bare);
  }
  await writeFile(
    join(consumer, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2023',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        strict: true,
        outDir: 'out',
        rootDir: 'src',
        types: ['node'],
        skipLibCheck: false,
      },
      include: ['src'],
    }),
  );
  typeErrors = await run(join(consumer, 'node_modules', '.bin', 'tsc'), ['-p', '.'], {
    cwd: consumer,
    timeout: INSTALL_TIMEOUT_MS,
  }).then(
    ({ stdout }) => stdout,
    (error: { stdout?: string }) => error.stdout ?? String(error),
  );
}, INSTALL_TIMEOUT_MS * 2);

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('the tarballs', () => {
  it('ship built code with its types, a README and a license, and no tests or sources', () => {
    for (const { files } of [library, checker]) {
      const paths = files.map((f) => f.path);
      expect(paths).toEqual(expect.arrayContaining(['package.json', 'README.md', 'LICENSE']));
      const js = paths.filter((p) => p.endsWith('.js'));
      expect(js.length).toBeGreaterThan(2);
      for (const file of js) expect(paths).toContain(file.replace(/\.js$/, '.d.ts'));
      expect(paths.filter((p) => /test|fixture|\.ts$/.test(p) && !p.endsWith('.d.ts'))).toEqual([]);
    }
  });

  it('pass publint: every export resolves to a file that is there, in the format it claims', async () => {
    for (const pkgDir of [join(ROOT, 'packages', 'idempotency'), join(ROOT, 'packages', 'checker')]) {
      const { messages } = await publint({ pkgDir, level: 'warning', pack: 'npm' });
      expect(messages.map((m) => `${m.code} ${m.path.join('.')}`)).toEqual([]);
    }
  }, 60_000);
});

describe('the library, installed from its tarball', () => {
  it("type-checks the README's v2 and v1 snippets against it, skipLibCheck off", () => {
    expect(typeErrors).toBe('');
  });

  it('imports every subpath in Node', async () => {
    const subpaths = [
      '',
      '/sdk-v2',
      '/sdk-v1',
      '/redis',
      '/postgres',
      '/sqlite',
      '/client',
      '/otel',
      '/ai-sdk',
      '/langchain',
      '/mastra',
    ];
    const script = `for (const p of ${JSON.stringify(subpaths)}) { const m = await import('mcp-request-idempotency' + p); if (Object.keys(m).length === 0) throw new Error(p); }
const { version } = (await import('mcp-request-idempotency/package.json', { with: { type: 'json' } })).default;
console.log(version);`;
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], { cwd: consumer });
    expect(stdout.trim()).toBe(
      JSON.parse(readFileSync(join(ROOT, 'packages', 'idempotency', 'package.json'), 'utf8')).version,
    );
  });

  it(
    'loads its root entry with no SDK and no store client installed',
    async () => {
      const bare = join(dir, 'bare');
      await mkdir(bare);
      await writeFile(
        join(bare, 'package.json'),
        JSON.stringify({ name: 'bare', private: true, type: 'module' }),
      );
      await run(
        'npm',
        ['install', '--no-audit', '--no-fund', '--prefer-offline', join(dir, library.filename)],
        {
          cwd: bare,
          timeout: INSTALL_TIMEOUT_MS,
        },
      );
      const { stdout } = await run(
        process.execPath,
        [
          '--input-type=module',
          '-e',
          `const m = await import('mcp-request-idempotency'); const store = new m.MemoryIdempotencyStore();
console.log(typeof m.createToolCallGuard, store.size);
await import('mcp-request-idempotency/sdk-v2').catch((e) => console.log(e.code, e.message.match(/'(@[^']+)'/)?.[1]));
const { SqliteIdempotencyStore } = await import('mcp-request-idempotency/sqlite');
console.log(await SqliteIdempotencyStore.open('records.sqlite').then((s) => (s.close(), s.driver), (e) => e.message));`,
        ],
        { cwd: bare },
      );
      // The root entry works alone; the v2 adapter names a peer of the v2 line it needs; the SQLite
      // store needs nothing installed where Node has SQLite, and says what to install where not.
      const [root, adapter, sqlite] = stdout.trim().split('\n');
      expect(root).toBe('function 0');
      expect(adapter).toMatch(/^ERR_MODULE_NOT_FOUND @modelcontextprotocol\/(server|client)$/);
      expect(sqlite).toBe(
        process.getBuiltinModule('node:sqlite')
          ? 'node:sqlite'
          : `idempotency store unavailable: records.sqlite: the SQLite store needs node:sqlite (Node 22.13 or later; this is Node ${process.versions.node}) or the better-sqlite3 package: npm install better-sqlite3@12 (in this package's repository: npm run sqlite:install)`,
      );
    },
    INSTALL_TIMEOUT_MS,
  );
});

/** `node out/<file>` over stdio, through the SDK client, in `era`. */
async function overStdio(file: string, era: Era) {
  const client = newClient(era);
  await client.connect(
    new StdioClientTransport({
      command: process.execPath,
      args: [join('out', file)],
      cwd: consumer,
      stderr: 'ignore',
    }),
  );
  return client;
}

/** `node out/<file> --http` on a free port, and an SDK client of it in `era`. */
async function overHttp(file: string, era: Era) {
  const child = spawn(process.execPath, [join('out', file), '--http'], {
    cwd: consumer,
    env: { ...process.env, PORT: '0' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${file} did not listen`)), 15_000);
    child.once('exit', (code) => reject(new Error(`${file} exited with ${code}`)));
    createInterface({ input: child.stderr }).on('line', (line) => {
      const match = /"port":(\d+)/.exec(line);
      if (match) {
        clearTimeout(timer);
        resolve(Number(match[1]));
      }
    });
  });
  const client = newClient(era);
  await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`)));
  return {
    client,
    close: async () => {
      await client.close();
      child.kill();
    },
  };
}

const keyedCharge = (idempotencyKey: string) => ({
  name: 'charge',
  arguments: { amount: 100 },
  idempotencyKey,
});

describe("the library README's servers, compiled and run", () => {
  const cases: Array<[string, Era]> = [
    ['server.js', MODERN_PROTOCOL_VERSION],
    ['server.js', LEGACY_PROTOCOL_VERSION],
    ['server-v1.js', LEGACY_PROTOCOL_VERSION],
  ];
  for (const [file, era] of cases) {
    it(`${file} over stdio, ${era}: a keyed retry replays, charged once`, async () => {
      const client = await overStdio(file, era);
      try {
        const first = await callTool(client, keyedCharge(`stdio-${era}`));
        const retry = await callTool(client, keyedCharge(`stdio-${era}`));
        expect(textOf(first)).toBe('Charged 100. New balance: 100');
        expect(retry).toEqual(first);
        expect(textOf(await callTool(client, { name: 'charge', arguments: { amount: 100 } }))).toBe(
          'Charged 100. New balance: 200',
        );
      } finally {
        await client.close();
      }
    }, 60_000);

    it(`${file} over stateless HTTP, ${era}: a keyed retry replays, charged once`, async () => {
      const { client, close } = await overHttp(file, era);
      try {
        const first = await callTool(client, keyedCharge(`http-${era}`));
        const retry = await callTool(client, keyedCharge(`http-${era}`));
        expect(textOf(first)).toBe('Charged 100. New balance: 100');
        expect(textOf(retry)).toBe('Charged 100. New balance: 100');
      } finally {
        await close();
      }
    }, 60_000);
  }
});

/** A checker run, with room for a busy machine: what the test is about is its verdict. */
const CHECKER_RUN_MS = 240_000;

describe('the checker, run with npx from its tarball', () => {
  const check = (server: string, budget: number) =>
    run(
      'npx',
      [
        '--no-install',
        'mcp-idempotency-check',
        '--command',
        `node out/${server}`,
        '--tool',
        'charge',
        '--arguments',
        '{"amount":1}',
        // The README's server takes 500 ms a charge: a default run would explore for 30 s, and
        // shrink for up to 30 more, where what the test is about is the verdict.
        '--budget',
        String(budget),
      ],
      { cwd: consumer, timeout: CHECKER_RUN_MS },
    ).then(
      ({ stdout }) => ({ code: 0, stdout }),
      (error: { code?: number; stdout?: string }) => ({ code: error.code, stdout: error.stdout ?? '' }),
    );

  it(
    "passes against the README's v2 server",
    async () => {
      // One generated history, so the explorer runs from the tarball too.
      const { code, stdout } = await check('server.js', 1);
      expect(stdout).toContain('replay.not-executed');
      expect(stdout).toContain('Explored 1 generated history (');
      expect(code).toBe(0);
    },
    CHECKER_RUN_MS,
  );

  it(
    'fails against the same server without the guard, where the SDK strips the key',
    async () => {
      const { code, stdout } = await check('bare-server.js', 0);
      expect(stdout).toMatch(/✗ replay\.not-executed/);
      expect(code).toBe(1);
    },
    CHECKER_RUN_MS,
  );
});
