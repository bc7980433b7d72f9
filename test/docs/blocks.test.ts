// Every fenced block of every page, run as a reader runs it. A block is listed below by its page
// and its first line, with what it is: a command run here as written (bash, in the repository, its
// output checked), a step `.ci/run` performs as written, code another test compiles and runs, a
// fragment that says what it needs, or what a command prints. A block on no list fails the first
// test, and a listing that matches no block fails it too: a page cannot gain a command nobody ran.
//
// Run as written, with one liberty: a port a block names is replaced by a free one (the same in
// every line of the block, and in what the test then sends), so a run beside another one, or beside
// a server of the reader's own, cannot collide; where the reader pastes the block whole, the page
// says to do the same when a port is taken. A block that starts servers in the background stops
// them itself, and the test holds it to that: its ports are free once it ends. Every process a block starts, in the background
// or not, is in the block's own process group, which is killed when the block's check ends.

import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { START_TIMEOUT_MS, WAIT_MS } from '../../demo/processes/bounds.js';
import { freePort, type HttpInstance, ROOT, startHttpInstance } from '../../demo/processes/launch.js';
import { postMcp } from '../support/hostile.js';

const PAGES = [
  'README.md',
  'docs/reliability.md',
  'packages/idempotency/README.md',
  'packages/checker/README.md',
  'test/conformance/README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((file) => file.endsWith('.md'))
    .map((file) => `docs/${file}`),
];

interface Block {
  page: string;
  /** The line of the opening fence, counted from 1. */
  line: number;
  info: string;
  body: string;
}

function blocksOf(page: string): Block[] {
  const text = readFileSync(join(ROOT, page), 'utf8');
  return [...text.matchAll(/^```([^\n`]*)\n([\s\S]*?)^```$/gm)].map((match) => ({
    page,
    line: text.slice(0, match.index).split('\n').length,
    info: match[1]?.trim() ?? '',
    body: match[2] ?? '',
  }));
}

const firstLine = (block: Block) => block.body.split('\n').find((line) => line.trim() !== '') ?? '';

// --- What each block is ---

type Listing =
  /** Rendered by the page's viewer; nothing to run. */
  | { kind: 'diagram' }
  /** What a command prints, or an exchange on the wire, shown for reading. */
  | { kind: 'output' }
  /** Checked here, but not run: `check` says what of it is true. */
  | { kind: 'checked'; check: (block: Block) => void | Promise<void> }
  /** Run as written, by bash in the repository; `check` runs it and reads its output. */
  | { kind: 'run'; check: (block: Block) => Promise<void> }
  /** A step `.ci/run` performs as written: it cannot run inside the suite it starts. */
  | { kind: 'ci'; lines: string[] }
  /** A file of the quick start, compiled and run from the tarball by another test. */
  | { kind: 'compiled'; by: string }
  /** Code shown inside a program the page describes; the page says what it needs around it. */
  | { kind: 'fragment'; needs: string };

/**
 * Each block by its page and the start of its first line, or (`{ info }`) by its fence's info
 * string, which the library README's quick start names its files by.
 */
type Where = string | { info: string };
const LISTINGS: Array<{ page: string; where: Where; listing: Listing }> = [];
const list = (page: string, where: Where, listing: Listing) => LISTINGS.push({ page, where, listing });

const matches = (block: Block, where: Where) =>
  typeof where === 'string' ? firstLine(block).startsWith(where) : block.info === where.info;

function listingOf(block: Block) {
  return LISTINGS.filter(({ page, where }) => page === block.page && matches(block, where));
}

// --- Running a block ---

const children = new Set<ChildProcess>();
const scratch: string[] = [];
afterAll(() => {
  for (const child of children) killGroup(child);
  for (const dir of scratch) rmSync(dir, { recursive: true, force: true });
});

/** Kills the block's process group, the jobs it left in the background too, once its shell has ended. */
function killGroup(child: ChildProcess): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, 'SIGKILL');
  } catch {
    // Already gone.
  }
}

/** `script` with each port in `ports` replaced by a free one; the map says which. */
async function withFreePorts(
  script: string,
  ports: number[],
): Promise<{ script: string; port: Map<number, number> }> {
  const port = new Map<number, number>();
  for (const documented of ports) {
    expect(script, `the block names port ${documented}`).toMatch(new RegExp(`\\b${documented}\\b`));
    port.set(documented, await freePort());
  }
  let rewritten = script;
  for (const [documented, free] of port)
    rewritten = rewritten.replace(new RegExp(`\\b${documented}\\b`, 'g'), String(free));
  return { script: rewritten, port };
}

interface Running {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  /** Resolves with the exit code once the script has ended (its background jobs may run on). */
  exited: Promise<number | null>;
}

/**
 * Starts `script` in bash, in the repository, in a process group of its own. Its output goes to
 * files, not pipes: all it wrote before it exited is there once its exit is seen, however the event
 * loop orders a pipe's last bytes and the exit, and the jobs it leaves running write on there.
 */
function bash(script: string, env: NodeJS.ProcessEnv = {}): Running {
  const dir = mkdtempSync(join(tmpdir(), 'sep3182-block-'));
  scratch.push(dir);
  const [outFile, errFile] = [join(dir, 'stdout'), join(dir, 'stderr')];
  const [out, err] = [openSync(outFile, 'w'), openSync(errFile, 'w')];
  const child = spawn('bash', ['-c', script], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    detached: true,
    stdio: ['pipe', out, err],
  });
  closeSync(out);
  closeSync(err);
  children.add(child);
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  return {
    child,
    stdout: () => readFileSync(outFile, 'utf8'),
    stderr: () => readFileSync(errFile, 'utf8'),
    exited,
  };
}

/**
 * Runs `script` to its end within `ms` and returns what it printed. `after` runs once the script has
 * ended and before its process group is killed: what the script left running is still there to see.
 */
async function runToEnd(
  script: string,
  ms: number,
  env: NodeJS.ProcessEnv = {},
  after: () => Promise<void> = async () => {},
): Promise<string> {
  const running = bash(script, env);
  running.child.stdin?.end();
  const timer = setTimeout(() => killGroup(running.child), ms);
  try {
    const code = await running.exited.finally(() => clearTimeout(timer));
    expect(
      code,
      `${script}\nexited ${code}; stdout:\n${running.stdout().slice(-1500)}\nstderr:\n${running.stderr().slice(-1500)}`,
    ).toBe(0);
    await after();
    return running.stdout();
  } finally {
    killGroup(running.child);
  }
}

/** Whether something on this machine listens on `port` (loopback): a listener here fails to bind it. */
function portTaken(port: number): Promise<boolean> {
  const server = createNetServer();
  return new Promise((resolve) => {
    server.once('error', () => resolve(true));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(false)));
  });
}

/** Waits until every one of `ports` is free again: what the block started, its own `kill` stopped. */
async function portsFreed(ports: number[]): Promise<void> {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const held: number[] = [];
    for (const port of ports) if (await portTaken(port)) held.push(port);
    if (held.length === 0) return;
    if (Date.now() > deadline) throw new Error(`still listening after the block's kill: ${held.join(', ')}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * The answers a block's curl printed, parsed: found by their shape, since the servers the block
 * started write their log lines to the same terminal, at any moment.
 */
const answersIn = (printed: string): Array<Record<string, unknown>> =>
  [...printed.matchAll(/\{"result":.*?"jsonrpc":"2\.0","id":\d+\}/g)].map(([json]) => JSON.parse(json));

/** A page that names fixed ports must tell its reader to replace them when taken; then the test may. */
function pageSaysReplacePorts(block: Block): void {
  expect(readFileSync(join(ROOT, block.page), 'utf8').replace(/\n/g, ' ')).toMatch(
    /if (either|one|it) is taken, replace it everywhere in the block/,
  );
}

async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, running: Running): Promise<T> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline)
      throw new Error(`${what} within ${START_TIMEOUT_MS} ms; stderr:\n${running.stderr().slice(-2000)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * Runs the script's first line, the demo server a page says to start, and waits until it serves
 * alice's token on `port`: the server, and the rest of the script, to run against it.
 */
async function serveFirstLine(script: string, port: number): Promise<{ server: Running; rest: string[] }> {
  const [serveLine = '', ...rest] = script.split('\n');
  const server = bash(serveLine);
  await waitFor(
    'the demo server',
    () => post(port, 'server/discover', {}, { authorization: 'Bearer token-a' }),
    server,
  );
  return { server, rest };
}

const ENVELOPE = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientInfo': { name: 'docs-blocks', version: '0' },
  'io.modelcontextprotocol/clientCapabilities': {},
};

/** A 2026-07-28 request to an HTTP server the block started; its JSON-RPC answer, or undefined if none yet. */
async function post(
  port: number,
  method: string,
  params: Record<string, unknown>,
  headers: Record<string, string> = {},
): Promise<Record<string, unknown> | undefined> {
  const protocol = {
    'mcp-protocol-version': '2026-07-28',
    'mcp-method': method,
    ...(method === 'tools/call' && { 'mcp-name': String(params.name) }),
  };
  const body = { jsonrpc: '2.0', id: 1, method, params: { ...params, _meta: ENVELOPE } };
  return (await send(new URL(`http://127.0.0.1:${port}/mcp`), { ...protocol, ...headers }, body)) as
    | Record<string, unknown>
    | undefined;
}

const structured = (answer: Record<string, unknown> | undefined) =>
  (answer?.result as { structuredContent?: { charged?: number; balance?: number } } | undefined)
    ?.structuredContent;

// --- The listings, page by page ---

list('README.md', 'npm ci && npm run demo', {
  kind: 'ci',
  lines: ['npm ci --no-audit --no-fund', 'npm run -s demo', 'npm test'],
});
for (const starts of ['sequenceDiagram', 'flowchart']) {
  for (const page of PAGES) list(page, starts, { kind: 'diagram' });
}

list('docs/reliability.md', 'npx vitest run', {
  kind: 'checked',
  check: (block) => {
    // Running these files again inside the suite would run them twice; what the lines name is there.
    for (const file of block.body.matchAll(/test\/[\w-]+\.test\.ts/g))
      expect(existsSync(join(ROOT, file[0])), file[0]).toBe(true);
    for (const [, variable] of block.body.matchAll(/\b(SEP3182_[A-Z_]+)=/g)) {
      const readers = readdirSync(join(ROOT, 'test'), { recursive: true, encoding: 'utf8' }).filter(
        (file) =>
          file.endsWith('.ts') && readFileSync(join(ROOT, 'test', file), 'utf8').includes(variable ?? ''),
      );
      expect(readers, `a test reads ${variable}`).not.toEqual([]);
    }
  },
});

list('README.md', 'server.ts ', {
  kind: 'checked',
  // The map of the folders: test/docs/documents.test.ts holds it to the tree (every folder named, nothing else).
  check: (block) => {
    const named = block.body.split('\n').map((line) => line.split(/\s+/)[0] ?? '');
    expect(named.filter((path) => path !== '' && !existsSync(join(ROOT, path)))).toEqual([]);
  },
});

list('docs/how-it-works.md', 'packages/idempotency/ ', {
  kind: 'checked',
  check: (block) => {
    // The tree: every file and folder it names is where it says.
    const missing: string[] = [];
    const parents: string[] = [];
    for (const line of block.body.split('\n')) {
      const match = /^( *)(\S+)/.exec(line);
      if (!match || line.startsWith('                       ')) continue;
      const depth = (match[1]?.length ?? 0) / 2;
      const name = match[2] ?? '';
      parents.length = depth;
      const path = join(...parents, name);
      if (!existsSync(join(ROOT, path))) missing.push(path);
      if (name.endsWith('/')) parents[depth] = name;
    }
    expect(missing).toEqual([]);
  },
});
list('docs/how-it-works.md', '{"time":', { kind: 'output' });
list('docs/how-it-works.md', 'npx tsx server.ts [--http', {
  kind: 'checked',
  check: async (block) => {
    // The synopsis names every option `--help` lists, and no other.
    const help = await runToEnd('npx tsx server.ts --help', START_TIMEOUT_MS);
    const flags = (text: string) => new Set([...text.matchAll(/--[a-z][a-z-]+/g)].map(([flag]) => flag));
    // `--help`'s options are the flags that open its lines (its usage line names node's own).
    const options = [...help.matchAll(/^ {2}(--[a-z][a-z-]+)/gm)].map(([, flag]) => flag);
    expect([...flags(block.body)].sort()).toEqual(options.filter((flag) => flag !== '--help').sort());
  },
});
list('docs/how-it-works.md', 'test/interop/node_modules/.bin/mcp-inspector', {
  kind: 'run',
  check: async (block) => {
    const [list, call] = block.body.trim().split('\n');
    expect(await runToEnd(list ?? '', START_TIMEOUT_MS * 2)).toContain('"name": "charge_guarded"');
    expect(await runToEnd(call ?? '', START_TIMEOUT_MS * 2)).toContain('Charged 100');
  },
});
list('docs/how-it-works.md', "ENVELOPE='", {
  kind: 'run',
  check: async (block) => {
    const answers = (await runToEnd(block.body, START_TIMEOUT_MS * 2))
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line));
    const discover = answers.find((answer) => answer.id === 1);
    expect(discover?.result?.capabilities?.tools?.idempotency).toEqual({});
    expect(structured(answers.find((answer) => answer.id === 2))).toEqual({ charged: 100, balance: 100 });
  },
});

list('docs/scaling-out.md', 'redis-server --port 6379', {
  kind: 'run',
  check: async (block) => {
    pageSaysReplacePorts(block);
    const { script, port } = await withFreePorts(block.body, [6379, 3001, 3002]);
    // The call on A, then its retry on B: B answers from A's record, one charge in the shared ledger.
    const answers = answersIn(
      await runToEnd(script, START_TIMEOUT_MS * 2, {}, () => portsFreed([...port.values()])),
    );
    expect(answers.map(structured)).toEqual([
      { charged: 100, balance: 100 },
      { charged: 100, balance: 100 },
    ]);
    expect(answers[1]).toEqual(answers[0]);
  },
});

list('docs/reliability.md', 'Counterexample:', { kind: 'output' });

// The library README's quick start: its commands and files are run as a new user runs them, from
// the tarball, by test/docs/quickstart.test.ts (the v2 files, the commands, the printed attempts) and
// test/e2e/package.test.ts (every named file, the v1 server among them).
const LIBRARY = 'packages/idempotency/README.md';
for (const info of ['sh pack', 'sh setup', 'sh v1', 'sh v1-run', 'sh otel', 'sh run', 'text'])
  list(LIBRARY, { info }, { kind: 'compiled', by: 'test/docs/quickstart.test.ts' });
for (const block of blocksOf(LIBRARY).filter(({ info }) => /^ts \S+\.ts$/.test(info)))
  list(LIBRARY, { info: block.info }, { kind: 'compiled', by: 'test/e2e/package.test.ts' });
list(
  LIBRARY,
  { info: 'ts' },
  { kind: 'fragment', needs: 'an AI SDK chat (docs/agent-frameworks.md has the whole set-up)' },
);

for (const starts of [
  "import { createMCPClient } from '@ai-sdk/mcp'",
  'import { loadMcpTools }',
  "import { Agent } from '@mastra/core/agent'",
])
  list('docs/agent-frameworks.md', starts, {
    kind: 'fragment',
    needs: 'a model and a server URL; test/agents-*.test.ts run the same set-up against the demo server',
  });

// --- On the wire: the documented requests, sent to a real server, get the documented answers ---

/** A request block: its header lines, a blank line, its body. */
function requestOf(block: Block): { headers: Record<string, string>; body: Record<string, unknown> } {
  const [head = '', body = ''] = block.body.split('\n\n');
  const headers: Record<string, string> = {};
  for (const line of head.split('\n').slice(1)) {
    const [name = '', ...value] = line.split(':');
    headers[name.trim()] = value.join(':').trim();
  }
  return { headers, body: JSON.parse(body) };
}

/** The answer blocks that follow `block` on its page, each line of them parsed. */
function answersAfter(block: Block, count: number): unknown[] {
  const later = blocksOf(block.page).filter(({ line, info }) => line > block.line && info === 'json');
  return later.slice(0, count).flatMap(({ body }) =>
    body
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line)),
  );
}

async function send(url: URL, headers: Record<string, string>, body: unknown): Promise<unknown> {
  // The documented call omits the two headers every request carries, shown once above it.
  const response = await postMcp(url, JSON.stringify(body), headers, WAIT_MS);
  const text = await response.text();
  return JSON.parse(
    text.startsWith('{') ? text : (text.split('\n').find((line) => line.startsWith('data: ')) ?? '').slice(6),
  );
}

let wireServer: Promise<HttpInstance> | undefined;
/** One server for the page, its charges slow enough that a retry meets the original running. */
const wireServerUrl = async () => {
  wireServer ??= startHttpInstance(['--charge-latency-ms', '1500']);
  const instance = await wireServer;
  return new URL('/mcp', instance.url);
};
afterAll(async () => (await wireServer)?.kill());

/** The balance back to 0, so a page's answers are the first charge's. */
async function resetBalance(url: URL): Promise<void> {
  const params = { name: 'reset_ledger', arguments: {}, _meta: ENVELOPE };
  const headers = {
    'mcp-protocol-version': '2026-07-28',
    'mcp-method': 'tools/call',
    'mcp-name': 'reset_ledger',
  };
  await send(url, headers, { jsonrpc: '2.0', id: 0, method: 'tools/call', params });
}

list('docs/wire.md', 'POST /mcp', {
  kind: 'run',
  check: async (block) => {
    const url = await wireServerUrl();
    const { headers, body } = requestOf(block);
    if (body.method === 'server/discover') {
      expect(await send(url, headers, body)).toEqual(answersAfter(block, 1)[0]);
      return;
    }
    await resetBalance(url);
    // The call, a retry while it runs (id 8), the same again once it answered (id 9), other arguments (id 10).
    const [inProgress, original, replay, conflict] = answersAfter(block, 3);
    const retry = (id: number, params: Record<string, unknown> = {}) =>
      send(url, headers, { ...body, id, params: { ...(body.params as object), ...params } });
    const first = send(url, headers, body);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await retry(8)).toEqual(inProgress);
    expect(await first).toEqual(original);
    expect(await retry(9)).toEqual(replay);
    expect(await retry(10, { arguments: { amount: 999 } })).toEqual(conflict);
  },
});
list('docs/wire.md', '{"result":{"supportedVersions"', { kind: 'output' });
list('docs/wire.md', '{"jsonrpc":"2.0","id":8', { kind: 'output' });
list('docs/wire.md', '{"result":{"content"', { kind: 'output' });
list('docs/wire.md', '{"jsonrpc":"2.0","id":10', { kind: 'output' });
list('docs/wire.md', '{"result":{"protocolVersion":"2025-11-25"', {
  kind: 'checked',
  check: async (block) => {
    const url = await wireServerUrl();
    const initialize = {
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'curl', version: '0' } },
    };
    expect(await send(url, { 'mcp-protocol-version': '2025-11-25' }, initialize)).toEqual(
      JSON.parse(block.body),
    );
  },
});

/** Runs a stdio server block with `requests` on its stdin, one line each; its answers, by id. */
async function overStdio(
  script: string,
  requests: unknown[],
  env: NodeJS.ProcessEnv = {},
): Promise<Map<unknown, Record<string, unknown>>> {
  const running = bash(script, env);
  const answers = new Map<unknown, Record<string, unknown>>();
  const read = () => {
    for (const line of running.stdout().split('\n'))
      if (line.startsWith('{')) answers.set(JSON.parse(line).id, JSON.parse(line));
  };
  for (const request of requests) {
    running.child.stdin?.write(`${JSON.stringify(request)}\n`);
    const { id } = request as { id: unknown };
    await waitFor(
      `an answer to request ${String(id)}`,
      async () => {
        read();
        return answers.get(id);
      },
      running,
    );
  }
  running.child.stdin?.end();
  await running.exited;
  killGroup(running.child);
  return answers;
}

const request = (id: number, method: string, params: Record<string, unknown> = {}) => ({
  jsonrpc: '2.0',
  id,
  method,
  params: { ...params, _meta: ENVELOPE },
});

list('docs/sqlite.md', '', {
  kind: 'run',
  check: async (block) => {
    // The reader's home is a scratch folder: the block makes its folder there, as it would in theirs.
    const home = scratchDir();
    const charge = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: 'docs-sqlite' };
    const first = await overStdio(block.body, [request(1, 'tools/call', charge)], { HOME: home });
    expect(structured(first.get(1))).toEqual({ charged: 100, balance: 100 });
    // The record outlived the process: the next server on the file replays it.
    const again = await overStdio(block.body, [request(1, 'tools/call', charge)], { HOME: home });
    expect(again.get(1)).toEqual(first.get(1));
  },
});

list('docs/operations.md', 'node --import tsx server.ts --http --port 3000 --metrics-port 9464 &', {
  kind: 'run',
  check: async (block) => {
    pageSaysReplacePorts(block);
    const { script, port } = await withFreePorts(block.body, [3000, 9464]);
    const printed = await runToEnd(script, START_TIMEOUT_MS * 2, {}, () => portsFreed([...port.values()]));
    // The keyed call answered, and the scrape after it counts that one execution.
    expect(answersIn(printed).map(structured)).toEqual([{ charged: 100, balance: 100 }]);
    expect(printed).toMatch(
      /^idempotency_decisions_total\{idempotency_decision="executed",.*gen_ai_tool_name="charge_guarded".*\} 1$/m,
    );
  },
});
list('docs/operations.md', 'OTEL_EXPORTER_OTLP_ENDPOINT=', {
  kind: 'run',
  check: async (block) => {
    // In the foreground, with no collector at the endpoint: the server serves all the same.
    pageSaysReplacePorts(block);
    const { script, port } = await withFreePorts(block.body, [4318, 3000]);
    const server = bash(script);
    const http = port.get(3000) ?? 0;
    await waitFor('the server exporting OTLP', () => post(http, 'server/discover', {}), server);
    const key = { name: 'charge_guarded', arguments: { amount: 1 }, idempotencyKey: 'docs-operations' };
    expect(structured(await post(http, 'tools/call', key))).toEqual({ charged: 1, balance: 1 });
    killGroup(server.child);
  },
});

list('README.md', '{"jsonrpc":"2.0","id":1,"method":"tools/call"', {
  kind: 'run',
  check: async (block) => {
    // The front page's exchange, wrapped to fit it: the request sent twice gets both answers shown.
    const [call, ...answers] = block.body
      .split(/\n(?=\{)/)
      .map((json) => JSON.parse(json.replace(/\n\s*/g, '')));
    const url = await wireServerUrl();
    const headers = {
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': 'tools/call',
      'mcp-name': 'charge_guarded',
    };
    await send(url, headers, {
      ...call,
      id: 0,
      params: { name: 'reset_ledger', arguments: {}, _meta: call.params._meta },
    });
    expect(await send(url, headers, call)).toEqual(answers[0]);
    expect(await send(url, headers, { ...call, id: 2 })).toEqual(answers[1]);
  },
});

// The conformance scenario's folder: its tree, the fixture's shape, and the run by hand.
list('test/conformance/README.md', 'src/scenarios/server/idempotency.ts', {
  kind: 'checked',
  check: (block) => {
    for (const line of block.body.split('\n')) {
      const path = /^(\S+)/.exec(line)?.[1];
      if (path)
        expect(existsSync(join(ROOT, 'test', 'conformance', path)), `test/conformance/${path}`).toBe(true);
    }
  },
});
list('test/conformance/README.md', '{', { kind: 'output' });
list('test/conformance/README.md', 'MCP_CONFORMANCE_SEP_3182_FIXTURE=', {
  kind: 'run',
  check: async (block) => {
    // What the page says to start first, on the port the block then names.
    const page = readFileSync(join(ROOT, block.page), 'utf8');
    const serve = /`(DEMO_BEARER_TOKENS=\S+ npx tsx server\.ts --http [^`]+)`/.exec(page)?.[1];
    expect(serve, 'the page names the server to start').toBeDefined();
    const { script, port } = await withFreePorts(`${serve} --port 3000\n${block.body}`, [3000]);
    const { server, rest: run } = await serveFirstLine(script, port.get(3000) ?? 0);
    // Every check passed, the decline's errors check among them: no baseline of expected failures.
    expect(await runToEnd(run.join('\n'), START_TIMEOUT_MS * 4)).toMatch(/Passed: (\d+)\/\1, 0 failed/);
    killGroup(server.child);
  },
});

// The checker's page: its synopsis stands for the reader's server; its transcripts are run.
const CHECKER = 'packages/checker/README.md';
list(CHECKER, 'npm run check -- --command "python server.py"', {
  kind: 'fragment',
  needs: "the reader's own server (the page says so); the transcripts below run the same commands",
});
list(CHECKER, 'python3 -m venv .venv', {
  kind: 'fragment',
  needs:
    "a Python package index, which CI's machine may lack; test/checker/check.test.ts builds the same venv",
});
/** The `$ ` command of a transcript, with its continuation lines. */
function commandOf(block: Block): string {
  const lines: string[] = [];
  for (const line of block.body.split('\n').slice(0)) {
    if (lines.length === 0 && !line.startsWith('$ ')) continue;
    lines.push(lines.length === 0 ? line.slice(2) : line);
    if (!line.endsWith('\\')) break;
  }
  return lines.join('\n');
}
list(CHECKER, '$ npm run check -- --url http://127.0.0.1:3001/mcp', {
  kind: 'run',
  check: async (block) => {
    // The server the page starts just above, on a free port, and the command as shown.
    const page = readFileSync(join(ROOT, block.page), 'utf8');
    const serve = /Against the demo server \(`([^`]+)`\)/.exec(page.replace(/\n/g, ' '))?.[1];
    expect(serve, 'the page names the server to start').toBeDefined();
    const { script, port } = await withFreePorts(`${serve}\n${commandOf(block)}`, [3001]);
    const { server, rest: check } = await serveFirstLine(script, port.get(3001) ?? 0);
    const report = await runToEnd(check.join('\n'), START_TIMEOUT_MS * 6);
    // The transcript's verdict lines, as shown: the same rules held.
    for (const line of block.body.split('\n').filter((line) => /^\s+✓ \S+/.test(line)))
      expect(report).toContain(line.trim().split(/\s+/)[1]);
    killGroup(server.child);
  },
});
list(CHECKER, '$ npm run check -- --command "node --import tsx test/fixtures/checker/flawed.ts', {
  kind: 'run',
  check: async (block) => {
    // The fixture the command names, run as shown: it exits 0, reading the counter the page says.
    const report = await runToEnd(commandOf(block), START_TIMEOUT_MS * 6);
    const lines = block.body.split('\n');
    for (const line of lines.filter((line) => line.startsWith('counter: ') || /^\d+ failed/.test(line)))
      expect(report.split('\n')).toContain(line);
    for (const line of lines.filter((line) => /^\s+✓ \S+/.test(line)))
      expect(report).toContain(line.trim().split(/\s+/)[1]);
  },
});
// The explorer's report of a flawed fixture (it exits 1): test/checker/explore.test.ts runs it.
list(CHECKER, 'A server that deduplicates, but executes a duplicate', { kind: 'output' });
list(CHECKER, '$ npm run check -- --command ".venv/bin/python', {
  kind: 'fragment',
  needs:
    'the venv above; test/checker/check.test.ts runs the same check against the prototype where pip can install mcp',
});

const PAGE_COUNT = PAGES.length;

describe('every block on every page', () => {
  it(`is listed once, and every listing names a block (${PAGE_COUNT} pages)`, () => {
    const blocks = PAGES.flatMap(blocksOf);
    const unlisted = blocks.filter((block) => listingOf(block).length !== 1);
    expect(
      unlisted.map(
        (block) => `${block.page}:${block.line} ${firstLine(block)} (${listingOf(block).length} listings)`,
      ),
    ).toEqual([]);
    const unused = LISTINGS.filter(
      ({ page, where, listing }) =>
        listing.kind !== 'diagram' && !blocks.some((block) => block.page === page && matches(block, where)),
    );
    expect(unused.map(({ page, where }) => `${page}: ${JSON.stringify(where)}`)).toEqual([]);
  });

  it('has every .ci/run step it is listed as, as written', () => {
    const ci = readFileSync(join(ROOT, '.ci', 'run'), 'utf8');
    for (const { listing } of LISTINGS)
      if (listing.kind === 'ci') for (const line of listing.lines) expect(ci).toContain(line);
  });

  const runnable = PAGES.flatMap(blocksOf).flatMap((block) =>
    listingOf(block).flatMap(({ listing }) =>
      listing.kind === 'run' || listing.kind === 'checked' ? [{ block, listing }] : [],
    ),
  );
  it.each(
    runnable.map(
      ({ block, listing }) =>
        [`${block.page}:${block.line} ${firstLine(block).slice(0, 60)}`, block, listing] as const,
    ),
  )(
    '%s',
    async (_name, block, listing) => {
      if (listing.kind === 'run' || listing.kind === 'checked') await listing.check(block);
    },
    START_TIMEOUT_MS * 6,
  );
});

/** A scratch folder, removed after the file's tests. */
function scratchDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'sep3182-docs-'));
  scratch.push(dir);
  return dir;
}
