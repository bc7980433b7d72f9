// --- Real server processes, and SDK clients connected to them ---
//
// Starts `server.ts` the way a user would (stdio spawned by the client, or stateless HTTP on
// loopback) and connects a client of the current SDK line in either protocol era. The demo, the
// tests and the benchmark all start their servers here.

import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer as createNetServer } from 'node:net';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import {
  CLIENT_CAPABILITIES_META_KEY,
  CLIENT_INFO_META_KEY,
  Client,
  type ElicitRequest,
  type ElicitResult,
  PROTOCOL_VERSION_META_KEY,
  StreamableHTTPClientTransport,
  type Transport,
} from '@modelcontextprotocol/client';
import { getDefaultEnvironment, StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import {
  callTool,
  captureInitializeCapabilities,
  discoverCapabilities,
  LEGACY_PROTOCOL_VERSION,
  MODERN_PROTOCOL_VERSION,
} from 'mcp-request-idempotency/client';
import { START_TIMEOUT_MS } from './bounds.js';

/** The repository's root, where the demo's scripts are. */
export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The two protocol eras one server answers. */
export type Era = typeof MODERN_PROTOCOL_VERSION | typeof LEGACY_PROTOCOL_VERSION;

export const ERAS: readonly Era[] = [MODERN_PROTOCOL_VERSION, LEGACY_PROTOCOL_VERSION];

const CLIENT_INFO = { name: 'sep-3182-client-demo', version: '0.1.0' };

/**
 * Servers started from here write each decision line at once (`--log-flush-ms 0`): the demo
 * narrates, and the tests read, every decision as the call it belongs to is answered. A server
 * started by hand batches them (demo/hosting/log.ts), and the benchmark measures it that way.
 */
const LOG_AT_ONCE = ['--log-flush-ms', '0'];

/** The user, as a client asks them a server's question (form elicitation). */
export type AskUser = (request: ElicitRequest['params']) => Promise<ElicitResult>;

/**
 * A client of the current SDK line in `era`: pinned to 2026-07-28 (`server/discover`, then a
 * per-request envelope on every call), or the plain 2025-11-25 initialize handshake. Given
 * `askUser`, it declares form elicitation and answers a server's questions with it: on 2026-07-28
 * the SDK then answers `input_required` and sends the continuation by itself.
 */
export function newClient(era: Era, askUser?: AskUser): Client {
  const client = new Client(CLIENT_INFO, {
    ...(era === MODERN_PROTOCOL_VERSION && {
      versionNegotiation: { mode: { pin: MODERN_PROTOCOL_VERSION } },
    }),
    ...(askUser && { capabilities: { elicitation: { form: {} } } }),
  });
  if (askUser) client.setRequestHandler('elicitation/create', (request) => askUser(request.params));
  return client;
}

export interface ServerConnection {
  client: Client;
  era: Era;
  /** `capabilities` as they arrived on the wire: `server/discover` (2026) or initialize (2025). */
  rawCapabilities: unknown;
  /** That whole answer, the JSON-RPC response message exactly as received. */
  discovery: unknown;
  /** The server's stderr, one line per element (its decision log). */
  stderrLines: string[];
  /** The guard's decision log lines, parsed: every line written before the answers this process has. */
  decisions(): Promise<DecisionLine[]>;
  /** The server process's pid (for a test that freezes it). */
  pid: number;
  /** SIGKILL of the server process, as a crash would; resolves once the connection is closed. */
  kill(): Promise<void>;
  close(): Promise<void>;
}

interface Discovery {
  rawCapabilities: unknown;
  discovery: unknown;
}

/**
 * Connects `client` in its era and reads the capabilities as the server sent them: on 2026-07-28
 * by asking `server/discover` (the SEP: a client that requires deduplication SHOULD check it), on
 * 2025-11-25 from the initialize result.
 */
async function connectReadingCapabilities(
  client: Client,
  era: Era,
  transport: Transport,
): Promise<Discovery> {
  if (era === MODERN_PROTOCOL_VERSION) {
    await client.connect(transport);
    const answer = nextResponse(transport, (result) => Object.hasOwn(result, 'supportedVersions'));
    const rawCapabilities = await discoverCapabilities(client);
    return { rawCapabilities, discovery: await answer };
  }
  const capabilities = captureInitializeCapabilities(transport);
  const answer = nextResponse(transport, (result) => Object.hasOwn(result, 'protocolVersion'));
  await client.connect(transport);
  return { rawCapabilities: await capabilities, discovery: await answer };
}

/**
 * The next response message through `transport` whose result `matches`, as it arrived. The tap
 * stays in place: `connect` may have wrapped it since, so putting the old handler back would
 * unhook the client.
 */
function nextResponse(transport: Transport, matches: (result: object) => boolean): Promise<unknown> {
  return new Promise((resolve) => {
    const inner = transport.onmessage;
    let seen = false;
    transport.onmessage = (message, extra) => {
      if (!seen && 'result' in message && matches(message.result)) {
        seen = true;
        resolve(message);
      }
      inner?.(message, extra);
    };
  });
}

export interface StdioConnectOptions {
  era?: Era;
  /** The server script to spawn, relative to the project (default `server.ts`). */
  script?: string;
  /** The user the client asks when a tool asks a question. */
  askUser?: AskUser;
}

/** Spawns `server.ts` with `args` and connects an SDK client to it over stdio. */
export async function connectToServer(
  args: string[] = [],
  { era = MODERN_PROTOCOL_VERSION, script = 'server.ts', askUser }: StdioConnectOptions = {},
): Promise<ServerConnection> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: ['--import', 'tsx', join(ROOT, script), ...LOG_AT_ONCE, ...args],
    cwd: ROOT,
    env: getDefaultEnvironment(),
    stderr: 'pipe',
  });
  const stderrLines: string[] = [];
  let partial = '';
  transport.stderr?.on('data', (chunk: Buffer) => {
    const lines = (partial + chunk.toString('utf8')).split('\n');
    partial = lines.pop() ?? '';
    stderrLines.push(...lines);
  });
  const client = newClient(era, askUser);
  const discovered = await connectReadingCapabilities(client, era, transport);
  const pid = transport.pid;
  if (pid === null) throw new Error('the server process has no pid');
  const closed = new Promise<void>((resolve) => {
    const inner = client.onclose;
    client.onclose = () => {
      inner?.();
      resolve();
    };
  });
  return {
    client,
    era,
    ...discovered,
    stderrLines,
    decisions: () => decisionsIn(stderrLines),
    pid,
    kill: async () => {
      process.kill(pid, 'SIGKILL');
      await closed;
    },
    close: () => client.close(),
  };
}

/** A decision log line, parsed. */
export type DecisionLine = Record<string, unknown>;

/**
 * Resolves once this process has read every log line a server wrote before the answers this
 * process has. The server writes a call's lines before it answers the call, but the lines and the
 * answer come on two descriptors (stderr, and stdout or a socket), and the event-loop turn that
 * finds both ready may hand the answer to its caller first: a test that reads the log as soon as
 * it has an answer could miss that answer's lines. Both were ready in that turn, so by the next one
 * the lines have been read.
 */
export function logCaughtUp(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** The guard's decision lines among a server's stderr lines, parsed, once the log has caught up. */
export async function decisionsIn(stderrLines: readonly string[]): Promise<DecisionLine[]> {
  await logCaughtUp();
  return stderrLines
    .filter((line) => line.includes('"event":"idempotency"'))
    .map((line): DecisionLine => JSON.parse(line));
}

/** A server process serving stateless Streamable HTTP on loopback. */
export interface HttpInstance {
  pid: number;
  url: URL;
  /** Where it serves Prometheus text, when started with `--metrics-port`. */
  metricsUrl: URL | undefined;
  stderrLines: string[];
  /** The guard's decision log lines, parsed: every line written before the answers this process has. */
  decisions(): Promise<DecisionLine[]>;
  /** SIGKILL, as a crash would; resolves when the process is gone. */
  kill(): Promise<void>;
  /** SIGTERM (the server first records its open keyed calls), then SIGKILL after `graceMs`. */
  stop(graceMs?: number): Promise<void>;
}

/**
 * The HTTP instances still running, killed when this process exits however it exits (an uncaught
 * error, `process.exit`): an HTTP server has no stdin whose end would tell it to stop, and would
 * serve on, orphaned. (A stdio server stops when its stdin closes.)
 */
const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/** Every instance started from here seals `requestState` with one key, as a fleet's would. */
const FLEET_REQUEST_STATE_KEY = randomBytes(32).toString('base64url');

/** Spawns `server.ts --http --port 0 …args` and waits for its "listening" line. */
export async function startHttpInstance(
  args: string[] = [],
  env: NodeJS.ProcessEnv = {},
): Promise<HttpInstance> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', join(ROOT, 'server.ts'), '--http', '--port', '0', ...LOG_AT_ONCE, ...args],
    {
      cwd: ROOT,
      env: { DEMO_REQUEST_STATE_KEY: FLEET_REQUEST_STATE_KEY, ...process.env, ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  running.add(child);
  const stderrLines: string[] = [];
  const exited = new Promise<void>((resolve) =>
    child.once('exit', () => {
      running.delete(child);
      resolve();
    }),
  );
  const listening = new Promise<URL>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`server did not start: ${stderrLines.join('\n')}`)),
      START_TIMEOUT_MS,
    );
    child.once('exit', (code) => reject(new Error(`server exited with ${code}: ${stderrLines.join('\n')}`)));
    createInterface({ input: child.stderr }).on('line', (line) => {
      stderrLines.push(line);
      const match = /"event":"listening".*"url":"([^"]+)"/.exec(line);
      if (match?.[1]) {
        clearTimeout(timer);
        resolve(new URL(match[1]));
      }
    });
  });
  let url: URL;
  try {
    url = await listening;
  } catch (error) {
    child.kill('SIGKILL');
    await exited;
    throw error;
  }
  const { pid } = child;
  if (pid === undefined) throw new Error('the server process has no pid');
  const end = async (signal: NodeJS.Signals, graceMs: number) => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  };
  // Logged before the listening line, once the metrics server listens.
  const metrics = stderrLines
    .map((line) => /"event":"metrics","url":"([^"]+)"/.exec(line)?.[1])
    .find(Boolean);
  return {
    pid,
    url,
    metricsUrl: metrics === undefined ? undefined : new URL(metrics),
    stderrLines,
    decisions: () => decisionsIn(stderrLines),
    kill: () => end('SIGKILL', 0),
    stop: (graceMs = 30_000) => end('SIGTERM', graceMs),
  };
}

export interface HttpClientOptions {
  era?: Era;
  /** A bearer token to present on every request. */
  token?: string;
  /** The user the client asks when a tool asks a question. */
  askUser?: AskUser;
}

/** An SDK client over Streamable HTTP, optionally presenting a bearer token. */
export async function connectHttpClient(
  url: URL,
  { era = MODERN_PROTOCOL_VERSION, token, askUser }: HttpClientOptions = {},
): Promise<Client> {
  const headers: Record<string, string> = token ? { Authorization: `Bearer ${token}` } : {};
  const client = newClient(era, askUser);
  await client.connect(new StreamableHTTPClientTransport(url, { requestInit: { headers } }));
  return client;
}

// --- Raw 2026-07-28 requests over HTTP, for the scenarios that must control the bytes ---

/** The per-request envelope every 2026-07-28 request carries in `params._meta`. */
export const MODERN_ENVELOPE = {
  [PROTOCOL_VERSION_META_KEY]: MODERN_PROTOCOL_VERSION,
  [CLIENT_INFO_META_KEY]: CLIENT_INFO,
  [CLIENT_CAPABILITIES_META_KEY]: {},
};

export interface RawRequest {
  id: number | string;
  method: string;
  params: Record<string, unknown>;
}

/**
 * POSTs one 2026-07-28 request as raw JSON-RPC: the envelope in `params._meta` (beside whatever
 * `_meta` the request carries, a trace context), and the `MCP-Protocol-Version`, `Mcp-Method` and
 * `Mcp-Name` headers the revision requires over HTTP.
 */
export function postModern(
  url: URL,
  request: RawRequest,
  signal?: AbortSignal,
  headers: Record<string, string> = {},
): Promise<Response> {
  const name = request.params.name;
  return fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': MODERN_PROTOCOL_VERSION,
      'mcp-method': request.method,
      ...(typeof name === 'string' && { 'mcp-name': name }),
      ...headers,
    },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: request.id,
      method: request.method,
      params: { ...request.params, _meta: { ...Object(request.params._meta), ...MODERN_ENVELOPE } },
    }),
    signal,
  });
}

// --- The demo tools every scenario reads or resets ---

export async function balanceOf(client: Client): Promise<number> {
  const result = await callTool(client, { name: 'get_balance', arguments: {} });
  const balance = Reflect.get(result.structuredContent ?? {}, 'balance');
  if (typeof balance !== 'number')
    throw new Error(`get_balance returned no balance: ${JSON.stringify(result)}`);
  return balance;
}

export async function resetLedger(client: Client): Promise<void> {
  await callTool(client, { name: 'reset_ledger', arguments: {} });
}

/** A loopback port that was free a moment ago (and is closed now, until someone listens on it). */
export async function freePort(): Promise<number> {
  const server = createNetServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}
