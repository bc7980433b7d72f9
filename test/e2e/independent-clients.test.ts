// The server driven by clients that are not the SDK client the other tests use: JSON-RPC written
// by hand, in both protocol eras, over stdio and over HTTP with fetch; and the MCP Inspector's CLI
// for calls without a key. Anything that only works because both ends share the SDK's quirks
// fails here.

import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { IdempotencyErrorType, INVALID_PARAMS } from 'mcp-request-idempotency';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exitedAndRead, sleep } from '../../demo/processes/bounds.js';
import { postModern } from '../../demo/processes/launch.js';
import { uniqueKeyPrefix } from '../../demo/processes/redis-server.js';
import { redisForFile } from '../support/backends.js';
import { jsonRpcText, postRaw } from '../support/hostile.js';
import { serveHttpForSuite, startHttpInstance } from '../support/http.js';
import { type RawAnswer, RawStdioPeer } from '../support/raw-stdio.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const SLOW_CHARGE_MS = 600;

function field(value: unknown, name: string): unknown {
  return typeof value === 'object' && value !== null ? Reflect.get(value, name) : undefined;
}

/** The answer line with its id blanked, so two answers can be compared byte for byte. */
const withoutId = (line: string) => line.replace(/"id":("[^"]*"|\d+)/, '"id":_');

/** The names of the demo's five tools, sorted. */
const DEMO_TOOLS = ['charge_guarded', 'charge_unguarded', 'get_balance', 'refund_order', 'reset_ledger'];

// --- 2026-07-28, by hand: server/discover and a keyed call, with the envelope and headers ---

const CAPABILITY = { tools: { idempotency: {} } };

describe('hand-written 2026-07-28 requests over stdio, no initialize', () => {
  let peer: RawStdioPeer;
  beforeAll(() => {
    peer = RawStdioPeer.startModern();
  });
  afterAll(async () => {
    await peer?.stop();
  });

  it('finds tools.idempotency in the server/discover answer', async () => {
    const discover = await peer.request('server/discover', {});
    expect(discover.message).toMatchObject({
      result: { supportedVersions: ['2026-07-28'], capabilities: CAPABILITY },
    });
  });

  it('replays a keyed retry byte for byte, but for its id, and executes once', async () => {
    const params = { name: 'charge_guarded', arguments: { amount: 7 }, idempotencyKey: randomUUID() };
    const first = await peer.request('tools/call', params);
    const retry = await peer.request('tools/call', params);
    expect(first.message).toMatchObject({ result: { structuredContent: { charged: 7, balance: 7 } } });
    expect(withoutId(retry.line)).toBe(withoutId(first.line));
    expect((await peer.decisions()).map((d) => d.decision)).toStrictEqual(['executed', 'replayed']);
  });

  it('rejects the key with other arguments as a conflict, with the SEP data', async () => {
    const params = { name: 'charge_guarded', arguments: { amount: 1 }, idempotencyKey: randomUUID() };
    await peer.request('tools/call', params);
    const other = await peer.request('tools/call', { ...params, arguments: { amount: 2 } });
    expect(other.message.error).toMatchObject({
      code: INVALID_PARAMS,
      data: { type: IdempotencyErrorType.conflict, idempotencyKey: params.idempotencyKey },
    });
  });
});

describe('hand-written 2026-07-28 requests over HTTP (fetch), each on its own', () => {
  const server = serveHttpForSuite();

  const send = async (id: number, method: string, params: Record<string, unknown>) => {
    const response = await postModern(server().url, { id, method, params });
    return { status: response.status, text: await response.text() };
  };

  it('finds tools.idempotency in the server/discover answer', async () => {
    const { status, text } = await send(1, 'server/discover', {});
    expect(status).toBe(200);
    expect(JSON.parse(text)).toMatchObject({ result: { capabilities: CAPABILITY } });
  });

  it('replays a keyed retry with a new request id byte for byte, but for its id, and executes once', async () => {
    const params = { name: 'charge_guarded', arguments: { amount: 5 }, idempotencyKey: randomUUID() };
    const first = await send(1, 'tools/call', params);
    const retry = await send(2, 'tools/call', params);
    expect(first.status).toBe(200);
    expect(JSON.parse(first.text)).toMatchObject({ result: { structuredContent: { charged: 5 } } });
    expect(withoutId(retry.text)).toBe(withoutId(first.text));
    const decisions = (await server().decisions()).filter((d) => d.idempotencyKey === params.idempotencyKey);
    expect(decisions.map((d) => d.decision)).toStrictEqual(['executed', 'replayed']);
  });

  it('rejects the key with other arguments as a conflict, with the SEP data', async () => {
    const params = { name: 'charge_guarded', arguments: { amount: 1 }, idempotencyKey: randomUUID() };
    await send(1, 'tools/call', params);
    const other = await send(2, 'tools/call', { ...params, arguments: { amount: 2 } });
    expect(JSON.parse(other.text)).toMatchObject({
      error: {
        code: INVALID_PARAMS,
        data: { type: IdempotencyErrorType.conflict, idempotencyKey: params.idempotencyKey },
      },
    });
  });
});

// --- stdio, by hand ---

describe('hand-written JSON-RPC over stdio, from the first byte', () => {
  let peer: RawStdioPeer;
  let slow: RawStdioPeer;
  let initialize: RawAnswer;

  beforeAll(async () => {
    const [fast, slowStart] = await Promise.all([
      RawStdioPeer.start(),
      RawStdioPeer.start(['--charge-latency-ms', String(SLOW_CHARGE_MS)]),
    ]);
    ({ peer, initialize } = fast);
    slow = slowStart.peer;
  });
  afterAll(async () => {
    await Promise.all([peer?.stop(), slow?.stop()]);
  });

  const call = (target: RawStdioPeer, id: string | number, params: Record<string, unknown>) =>
    target.requestLine(id, JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params }));

  it('completes the handshake a client writes itself, and finds tools.idempotency in it', () => {
    expect(initialize.message).toMatchObject({
      jsonrpc: '2.0',
      result: {
        protocolVersion: '2025-11-25',
        capabilities: { tools: { idempotency: {} } },
        serverInfo: { name: 'sep-3182-idempotency-demo' },
      },
    });
  });

  it('answers an older client in the protocol version it asked for', async () => {
    const answer = await initializeWith('2025-03-26');
    expect(field(answer.result, 'protocolVersion')).toBe('2025-03-26');
    expect(field(field(answer.result, 'capabilities'), 'tools')).toMatchObject({ idempotency: {} });
  });

  it('lists the tools with a JSON Schema for each one’s arguments', async () => {
    const { message } = await peer.request('tools/list', {});
    const tools = field(message.result, 'tools');
    expect(Array.isArray(tools) ? tools.map((t) => field(t, 'name')).sort() : tools).toStrictEqual(
      DEMO_TOOLS,
    );
    const charge = Array.isArray(tools)
      ? tools.find((t) => field(t, 'name') === 'charge_guarded')
      : undefined;
    expect(field(charge, 'inputSchema')).toMatchObject({
      type: 'object',
      properties: { amount: { type: 'integer' } },
      required: ['amount'],
    });
  });

  it('answers ping', async () => {
    const { line } = await peer.requestLine('p', '{"jsonrpc":"2.0","id":"p","method":"ping"}');
    expect(line).toBe('{"result":{},"jsonrpc":"2.0","id":"p"}');
  });

  it('replays a keyed call to a string id and a number id with the same bytes', async () => {
    const params = { name: 'charge_guarded', arguments: { amount: 7 }, idempotencyKey: randomUUID() };
    const first = await call(peer, 'first', params);
    const retry = await call(peer, 9001, params);
    expect(first.line).toContain('"id":"first"');
    expect(retry.line).toContain('"id":9001');
    expect(withoutId(retry.line)).toBe(withoutId(first.line));
    expect(first.message.result).toMatchObject({ structuredContent: { charged: 7 } });
  });

  it('executes calls without a key every time, as before the SEP', async () => {
    const first = await call(peer, 'u1', { name: 'charge_unguarded', arguments: { amount: 1 } });
    const second = await call(peer, 'u2', { name: 'charge_unguarded', arguments: { amount: 1 } });
    const before = Number(field(field(first.message.result, 'structuredContent'), 'balance'));
    expect(field(second.message.result, 'structuredContent')).toStrictEqual({
      charged: 1,
      balance: before + 1,
    });
  });

  it('answers a duplicate in flight with in-progress at once, and a cancelled call is charged once and replayed', async () => {
    await call(slow, 'reset', { name: 'reset_ledger', arguments: {} });
    const idempotencyKey = randomUUID();
    const params = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey };
    slow.writeLine(JSON.stringify({ jsonrpc: '2.0', id: 'original', method: 'tools/call', params }));
    await sleep(SLOW_CHARGE_MS / 4);
    const duplicate = await call(slow, 'duplicate', params);
    expect(duplicate.message.error).toStrictEqual({
      code: INVALID_PARAMS,
      message: 'A request with this idempotencyKey is still in progress; retry later with the same key',
      data: { type: IdempotencyErrorType.inProgress, idempotencyKey },
    });
    // The client gives up on the original, as a timed-out client does: the server never answers it.
    slow.writeLine(
      JSON.stringify({
        jsonrpc: '2.0',
        method: 'notifications/cancelled',
        params: { requestId: 'original', reason: 'timeout' },
      }),
    );
    await sleep(SLOW_CHARGE_MS);
    const retry = await call(slow, 'retry', params);
    expect(field(retry.message.result, 'structuredContent')).toStrictEqual({ charged: 100, balance: 100 });
    expect(slow.stdoutLines.some((line) => line.includes('"id":"original"'))).toBe(false);
    const decided = (await slow.decisions())
      .filter((d) => d.idempotencyKey === idempotencyKey)
      .map((d) => d.decision);
    expect(decided).toStrictEqual(['inProgress', 'executed', 'replayed']);
  });
});

/** A fresh server process, asked for `protocolVersion` in the first line it reads; resolves with its answer. */
async function initializeWith(protocolVersion: string): Promise<Record<string, unknown>> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'server.ts')], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'ignore'],
  });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.stdin.on('error', () => {}); // a server that exits unread: no answer within the bound below
  try {
    child.stdin.write(
      `${JSON.stringify({
        jsonrpc: '2.0',
        id: 0,
        method: 'initialize',
        params: { protocolVersion, capabilities: {}, clientInfo: { name: 'older', version: '0' } },
      })}\n`,
    );
    const first: unknown[] = await Promise.race([
      once(createInterface({ input: child.stdout }), 'line'),
      sleep(15_000).then(() => []),
    ]);
    const [line] = first;
    if (typeof line !== 'string') throw new Error('no initialize answer within 15 s');
    return Object.fromEntries(Object.entries(JSON.parse(line)));
  } finally {
    child.kill('SIGKILL');
    await exited;
  }
}

// --- HTTP, by hand ---

const redis = await redisForFile();

describe('hand-written HTTP requests (fetch), no MCP client at all', () => {
  const server = serveHttpForSuite();

  it('gets the capability from an initialize POST, with no session id (stateless)', async () => {
    const response = await fetch(server().url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 0,
        method: 'initialize',
        params: {
          protocolVersion: '2025-11-25',
          capabilities: {},
          clientInfo: { name: 'fetch', version: '0' },
        },
      }),
    });
    expect(response.status).toBe(200);
    expect(response.headers.get('mcp-session-id')).toBeNull();
    expect(field(JSON.parse(await jsonRpcText(response)), 'result')).toMatchObject({
      capabilities: { tools: { idempotency: {} } },
    });
  });

  it('refuses a client that does not accept text/event-stream with 406, as the transport specification requires', async () => {
    const response = await fetch(server().url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
    });
    expect(response.status).toBe(406);
  });

  it.skipIf(!redis)(
    'replays a keyed call retried on a second instance sharing Redis, byte for byte',
    async () => {
      if (!redis) throw new Error('unreachable');
      const prefix = uniqueKeyPrefix('independent');
      const args = ['--store', 'redis', '--redis-url', redis.url, '--redis-prefix', prefix];
      const [a, b] = await Promise.all([startHttpInstance(args), startHttpInstance(args)]);
      try {
        const body = JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'tools/call',
          params: { name: 'charge_guarded', arguments: { amount: 5 }, idempotencyKey: randomUUID() },
        });
        const first = await postRaw(a.url, body);
        const retry = await postRaw(b.url, body);
        expect(first.status).toBe(200);
        expect(retry.text).toBe(first.text);
        expect(first.text).toContain('"structuredContent":{"charged":5,"balance":5}');
      } finally {
        await Promise.all([a.stop(), b.stop()]);
        await redis.flush(prefix);
      }
    },
  );
});

// --- The MCP Inspector CLI ---

const INSPECTOR =
  process.env.SEP3182_INSPECTOR ?? join(ROOT, 'test', 'interop', 'node_modules', '.bin', 'mcp-inspector');
const inspectorFound = existsSync(INSPECTOR);
if (!inspectorFound) {
  console.warn(
    `MCP Inspector tests skipped: ${INSPECTOR} not found (npm ci --prefix interop installs it, or set SEP3182_INSPECTOR)`,
  );
}

/**
 * Runs the Inspector's CLI mode; resolves with its JSON output. For an `isError` result some
 * versions exit non-zero (2.x) and some 0 (0.x), printing the result either way: `toolError`
 * accepts both. Its home is a scratch directory, so it writes nothing into the user's.
 */
async function inspector(args: string[], home: string, toolError = false): Promise<unknown> {
  const child = spawn(process.execPath, [INSPECTOR, '--cli', ...args], {
    cwd: ROOT,
    env: { ...process.env, HOME: home },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  const code = await exitedAndRead(child);
  clearTimeout(timer);
  if (code !== 0 && !toolError) throw new Error(`inspector exited with ${code}: ${stderr}`);
  return JSON.parse(stdout);
}

describe.skipIf(!inspectorFound)('the MCP Inspector CLI, calls without a key', () => {
  const stdioServer = ['node', '--import', 'tsx', join(ROOT, 'server.ts')];
  /** The Inspector's arguments for a charge of 100 through the tool without the guard. */
  const UNGUARDED_CHARGE = [
    '--method',
    'tools/call',
    '--tool-name',
    'charge_unguarded',
    '--tool-arg',
    'amount=100',
  ];
  let home: string;
  const server = serveHttpForSuite();
  beforeAll(async () => {
    home = await mkdtemp(join(tmpdir(), 'sep3182-inspector-'));
  });
  afterAll(async () => {
    if (home) await rm(home, { recursive: true, force: true });
  });

  it('lists the five tools over stdio', async () => {
    const listed = await inspector([...stdioServer, '--method', 'tools/list'], home);
    const tools = field(listed, 'tools');
    expect(Array.isArray(tools) ? tools.map((t) => field(t, 'name')).sort() : tools).toStrictEqual(
      DEMO_TOOLS,
    );
  });

  it('charges over stdio and reads the structured result', async () => {
    const result = await inspector([...stdioServer, ...UNGUARDED_CHARGE], home);
    expect(result).toStrictEqual({
      content: [{ type: 'text', text: 'Charged 100. New balance: 100' }],
      structuredContent: { charged: 100, balance: 100 },
    });
  });

  it('charges every time over stateless HTTP, exactly as before the SEP', async () => {
    const charge = [server().url.href, ...UNGUARDED_CHARGE];
    const first = await inspector(charge, home);
    const second = await inspector(charge, home);
    expect(field(first, 'structuredContent')).toStrictEqual({ charged: 100, balance: 100 });
    expect(field(second, 'structuredContent')).toStrictEqual({ charged: 100, balance: 200 });
  });

  it('gets the server’s own tool error for an invalid amount, as an isError result', async () => {
    const result = await inspector(
      [...stdioServer, '--method', 'tools/call', '--tool-name', 'charge_guarded', '--tool-arg', 'amount=-1'],
      home,
      true,
    );
    expect(field(result, 'isError')).toBe(true);
    expect(JSON.stringify(field(result, 'content'))).toMatch(/amount/);
  });
});
