// --- Raw JSON-RPC to the server under test, over stdio or Streamable HTTP, in either era ---
//
// No SDK client: the checker writes every byte of every request itself, so it can send `1.0`,
// escaped characters, odd whitespace and reordered keys exactly as a check needs, and it reads
// the capability exactly as the server sent it.

import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';

// The checker's own copies of the protocol's constants, written from the specification: it shares
// no code with the server it checks, so a mistake there cannot hide a mistake here.

/** The stateless revision the SEP is written for: `server/discover`, an envelope on every request. */
export const MODERN_PROTOCOL_VERSION = '2026-07-28';
/** The revision before it: initialize, then calls. */
export const LEGACY_PROTOCOL_VERSION = '2025-11-25';

export type Era = typeof MODERN_PROTOCOL_VERSION | typeof LEGACY_PROTOCOL_VERSION;

export type Target =
  | { kind: 'stdio'; command: string; args: string[] }
  | { kind: 'http'; url: URL; headers: Record<string, string> };

export interface Answer {
  /** The message exactly as it arrived (the stdout line, or the HTTP body or SSE `data:`). */
  text: string;
  message: Record<string, unknown>;
  /** When it arrived, in ms on `performance.now()`'s clock. */
  at: number;
  /** Over HTTP: the status, and the `WWW-Authenticate` challenge if the server sent one. */
  http?: { status: number; challenge?: string };
}

export interface Peer {
  readonly era: Era;
  /** `capabilities` as the server sent them: in `server/discover` (2026) or initialize (2025). */
  readonly capabilities: unknown;
  /** Where they came from, for the report. */
  readonly discoveredBy: 'server/discover' | 'initialize';
  /** Sends `method` with `paramsText`, a JSON object written by hand; the envelope is added on 2026-07-28. */
  request(method: string, paramsText: string, toolName?: string): Promise<Answer>;
  close(): Promise<void>;
}

export interface ConnectOptions {
  era: Era | 'auto';
  timeoutMs: number;
}

const CLIENT_INFO = { name: 'sep-3182-checker', version: '0.1.0' };

/** The per-request envelope every 2026-07-28 request carries in `params._meta`. */
const MODERN_ENVELOPE = {
  'io.modelcontextprotocol/protocolVersion': MODERN_PROTOCOL_VERSION,
  'io.modelcontextprotocol/clientInfo': CLIENT_INFO,
  'io.modelcontextprotocol/clientCapabilities': {},
};

/** The 2026-07-28 envelope goes first in params; the checker's own bytes follow untouched. */
function withEnvelope(paramsText: string): string {
  const inner = paramsText.trim().replace(/^\{/, '');
  const rest = inner.trim().startsWith('}') ? inner : `,${inner}`;
  return `{"_meta":${JSON.stringify(MODERN_ENVELOPE)}${rest}`;
}

interface Exchange {
  send(id: number, method: string, line: string, toolName?: string): Promise<Answer>;
  close(): Promise<void>;
}

/** Connects in `era`; `auto` asks `server/discover` with the envelope and falls back to initialize. */
export async function connect(target: Target, options: ConnectOptions): Promise<Peer> {
  const exchange = target.kind === 'stdio' ? stdioExchange(target, options) : httpExchange(target, options);
  let nextId = 1;
  let era: Era = MODERN_PROTOCOL_VERSION;
  const request = (method: string, paramsText: string, toolName?: string) => {
    const id = nextId++;
    const params = era === MODERN_PROTOCOL_VERSION ? withEnvelope(paramsText) : paramsText;
    return exchange.send(
      id,
      method,
      `{"jsonrpc":"2.0","id":${id},"method":"${method}","params":${params}}`,
      toolName,
    );
  };
  try {
    if (options.era !== LEGACY_PROTOCOL_VERSION) {
      const discover = await request('server/discover', '{}').then(
        (answer) => ({ answer, failure: answer.text }),
        (error: unknown) => ({
          answer: undefined,
          failure: error instanceof Error ? error.message : String(error),
        }),
      );
      const result = discover.answer?.message.result;
      if (isObject(result)) return peer(MODERN_PROTOCOL_VERSION, result.capabilities, 'server/discover');
      if (options.era === MODERN_PROTOCOL_VERSION)
        throw new Error(`server/discover failed: ${discover.failure}`);
    }
    era = LEGACY_PROTOCOL_VERSION;
    const init = await request(
      'initialize',
      JSON.stringify({ protocolVersion: LEGACY_PROTOCOL_VERSION, capabilities: {}, clientInfo: CLIENT_INFO }),
    );
    const result = init.message.result;
    if (!isObject(result)) throw new Error(`initialize failed: ${init.text}`);
    await exchange.send(
      0,
      'notifications/initialized',
      '{"jsonrpc":"2.0","method":"notifications/initialized"}',
    );
    return peer(LEGACY_PROTOCOL_VERSION, result.capabilities, 'initialize');
  } catch (error) {
    await exchange.close();
    throw error;
  }

  function peer(chosen: Era, capabilities: unknown, discoveredBy: Peer['discoveredBy']): Peer {
    era = chosen;
    return { era, capabilities, discoveredBy, request, close: () => exchange.close() };
  }
}

// --- stdio: one JSON-RPC message per line, answers matched by id ---

/**
 * What a server that exited said of why: the error line its runtime printed (Node's `Error: Cannot
 * find module …`, Python's `ModuleNotFoundError: …`), else the last lines it wrote.
 */
export function whyItExited(stderr: string[]): string {
  const error = stderr.findLast((line) => /^[\w.]*(Error|Exception)\b[^:]*: /.test(line));
  if (error) return `: ${error}`;
  return stderr.length ? `: ${stderr.slice(-5).join('\n')}` : '';
}

/** Splits a command line on spaces, honouring '…' and "…" quotes (no shell is involved). */
export function splitCommandLine(line: string): string[] {
  const words: string[] = [];
  for (const match of line.matchAll(/"([^"]*)"|'([^']*)'|(\S+)/g))
    words.push(match[1] ?? match[2] ?? match[3] ?? '');
  return words;
}

function stdioExchange(target: Extract<Target, { kind: 'stdio' }>, { timeoutMs }: ConnectOptions): Exchange {
  const child: ChildProcessWithoutNullStreams = spawn(target.command, target.args, { stdio: 'pipe' });
  const waiting = new Map<string, (answer: Answer) => void>();
  let failure: Error | undefined;
  const stderr: string[] = [];
  const failAll = (error: Error) => {
    failure = error;
    for (const resolve of waiting.values()) resolve({ text: '', message: {}, at: performance.now() });
    waiting.clear();
  };
  child.on('error', (error) => failAll(new Error(`could not start ${target.command}: ${error.message}`)));
  // The exit can come before the last of stderr is read: its end is waited for, briefly, as a
  // process the server started may hold the pipe open.
  const stderrRead = new Promise<void>((resolve) => child.stderr.on('end', resolve));
  child.on(
    'exit',
    (code, signal) =>
      void Promise.race([stderrRead, sleep(200)]).then(() =>
        failAll(new Error(`the server exited (${signal ?? code})${whyItExited(stderr)}`)),
      ),
  );
  child.stdin.on('error', () => {}); // the exit handler reports a server that went away
  createInterface({ input: child.stderr }).on('line', (line) => stderr.push(line));
  createInterface({ input: child.stdout }).on('line', (text) => {
    const message = parseObject(text);
    if (!message || !('result' in message || 'error' in message)) return; // a notification or a log line
    const key = JSON.stringify(message.id);
    waiting.get(key)?.({ text, message, at: performance.now() });
    waiting.delete(key);
  });
  return {
    send(id, method, line, toolName) {
      if (failure) return Promise.reject(failure);
      child.stdin.write(`${line}\n`);
      if (id === 0) return Promise.resolve({ text: '', message: {}, at: performance.now() });
      return withTimeout(
        new Promise<Answer>((resolve, reject) =>
          waiting.set(String(id), (answer) => (failure ? reject(failure) : resolve(answer))),
        ),
        timeoutMs,
        `no answer to request ${id} (${requestName(method, toolName)}) within ${timeoutMs} ms`,
      );
    },
    async close() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.stdin.end();
      const term = setTimeout(() => child.kill('SIGTERM'), 2_000);
      const kill = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(term);
      clearTimeout(kill);
    },
  };
}

// --- Streamable HTTP: one POST per message; the answer is JSON, or one event of an SSE stream ---

/**
 * The answer to request `id`: a message with that id and a `result` or an `error`. A request the
 * server sends back on the same stream (a `ping`, an elicitation) may reuse the number as its own
 * id; it is not the answer.
 */
function answers(
  message: Record<string, unknown> | undefined,
  id: number,
): message is Record<string, unknown> {
  return message !== undefined && message.id === id && ('result' in message || 'error' in message);
}

function httpExchange(target: Extract<Target, { kind: 'http' }>, { timeoutMs }: ConnectOptions): Exchange {
  const session: Record<string, string> = {};
  return {
    async send(id, method, line, toolName) {
      const headers: Record<string, string> = {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        ...target.headers,
        ...session,
      };
      if (line.includes(`"_meta":${JSON.stringify(MODERN_ENVELOPE)}`)) {
        // 2026-07-28 over HTTP: the revision's routing headers mirror the body.
        headers['mcp-protocol-version'] = MODERN_PROTOCOL_VERSION;
        headers['mcp-method'] = method;
        if (toolName !== undefined) headers['mcp-name'] = toolName;
      } else if (method !== 'initialize') {
        // 2025-11-25: every request after initialize names the version it negotiated.
        headers['mcp-protocol-version'] = LEGACY_PROTOCOL_VERSION;
      }
      // One deadline for the whole exchange, the body included: an SSE stream may stay open.
      const signal = AbortSignal.timeout(timeoutMs);
      try {
        const response = await fetch(target.url, { method: 'POST', headers, body: line, signal });
        const sessionId = response.headers.get('mcp-session-id');
        if (sessionId) session['mcp-session-id'] = sessionId;
        const challenge = response.headers.get('www-authenticate') ?? undefined;
        const http = { status: response.status, ...(challenge !== undefined && { challenge }) };
        if (id === 0) {
          await response.body?.cancel();
          return { text: '', message: {}, at: performance.now(), http };
        }
        let seen = '';
        if (response.body && response.headers.get('content-type')?.includes('text/event-stream')) {
          // Event by event as they arrive: the answer may come before the stream ends, or never end it.
          for await (const text of sseEvents(response.body)) {
            const message = parseObject(text);
            if (answers(message, id)) return { text, message, at: performance.now(), http };
            seen ||= text;
          }
        } else {
          const text = await response.text();
          const message = parseObject(text);
          if (answers(message, id)) return { text, message, at: performance.now(), http };
          seen = text;
        }
        // A call refused by HTTP auth is an answer too (authorization.at-replay judges it); anything
        // else without a JSON-RPC answer, and any refusal while connecting, stays a loud failure.
        if (method === 'tools/call' && (response.status === 401 || response.status === 403))
          return { text: seen, message: {}, at: performance.now(), http };
        throw new Error(`HTTP ${response.status} without an answer to request ${id}: ${seen.slice(0, 300)}`);
      } catch (error) {
        if (signal.aborted)
          throw new Error(
            `no answer to request ${id} (${requestName(method, toolName)}) within ${timeoutMs} ms`,
          );
        throw error;
      }
    },
    async close() {},
  };
}

/** The `data:` payload of each SSE event, yielded as soon as the blank line that ends it arrives. */
async function* sseEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buffered = '';
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      buffered += done ? decoder.decode() : decoder.decode(value, { stream: true });
      const events = buffered.split(/\r?\n\r?\n/);
      buffered = done ? '' : (events.pop() ?? '');
      for (const event of events) {
        const data = event
          .split(/\r?\n/)
          .filter((line) => line.startsWith('data:'))
          .map((line) => line.slice(5).replace(/^ /, ''));
        if (data.length > 0) yield data.join('\n');
      }
      if (done) return;
    }
  } finally {
    // Stop reading once the answer is found: the server may keep the stream open.
    await reader.cancel().catch(() => {});
  }
}

function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function parseObject(text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return isObject(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/** What a request was, for a message about it: `tools/call charge_guarded`, `server/discover`. */
function requestName(method: string, toolName: string | undefined): string {
  return toolName === undefined ? method : `${method} ${toolName}`;
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
