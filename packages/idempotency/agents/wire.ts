// --- The key on the wire: `params.idempotencyKey`, beside `name` and `arguments` (SEP-3182) ---
//
// The agent frameworks' MCP clients send `{ name, arguments }` and take no other params; what each
// does take is a fetch (Streamable HTTP) or a transport (stdio, or any other). These wrap one, and
// write into each tools/call the key of the tool call it belongs to (call.ts). On the way
// they read the server's answer to initialize or server/discover: a server that does not advertise
// `tools.idempotency` gets its calls exactly as before, without a key, and the program is told so
// once. (A call to a server whose answer never passed a wrapper still carries the key: the SEP
// lets a client send one anyway.)

import { advertisesIdempotency, field } from '../core/capability.js';
import { AgentKeyWarnings, onceEach, ownedIdempotencyKey, type Warn } from './call.js';

export interface WireOptions {
  /** Told once per server that does not advertise the capability (default `console.warn`). */
  onWarning?: Warn;
}

/** The requests whose answer carries the server's capabilities, in either protocol era. */
const ASKS_CAPABILITIES: ReadonlySet<unknown> = new Set(['initialize', 'server/discover']);

/** One server, as far as the wire has seen it. */
class ServerOnTheWire {
  /** Undefined until its initialize or server/discover answer has passed. */
  private advertises?: boolean;
  /** Its `serverInfo.name`, once that answer has passed: for the warning. */
  private serverName?: string;

  /** `url`: where it is served, when it is served over HTTP. */
  constructor(
    private readonly warn: Warn,
    private readonly url?: string,
  ) {}

  /** Reads the capabilities (and the server's name) out of the answer. */
  learn(answer: unknown): void {
    const result = field(answer, 'result');
    if (field(result, 'capabilities') === undefined) return;
    this.advertises = advertisesIdempotency(field(result, 'capabilities'));
    const name = field(field(result, 'serverInfo'), 'name');
    if (typeof name === 'string') this.serverName = name;
  }

  private describe(): string {
    if (this.serverName === undefined) return this.url ?? 'behind this transport';
    return this.url === undefined ? this.serverName : `${this.serverName} (${this.url})`;
  }

  /** `message` as it should go: with the key of the tool call it belongs to, if it is owned. */
  keyed(message: object): object {
    if (field(message, 'method') !== 'tools/call') return message;
    const params = field(message, 'params');
    if (typeof params !== 'object' || params === null) return message;
    const idempotencyKey = ownedIdempotencyKey(field(params, 'name'), field(params, 'arguments'));
    // A key the caller chose stays: whoever sends the call that way owns its retries.
    if (idempotencyKey === undefined || 'idempotencyKey' in params) return message;
    if (this.advertises === false) {
      this.warn(AgentKeyWarnings.notAdvertised(this.describe()));
      return message;
    }
    return { ...message, params: { ...params, idempotencyKey } };
  }
}

// --- Streamable HTTP: a fetch ---

/**
 * A fetch for the framework's MCP client over Streamable HTTP (`fetch` in its HTTP transport
 * options): every tools/call it posts carries the key of the tool call under way. Wraps
 * `options.fetch` (default: the global one).
 */
export function fetchWithIdempotencyKeys(
  options: WireOptions & { fetch?: typeof globalThis.fetch } = {},
): typeof globalThis.fetch {
  const fetch = options.fetch ?? globalThis.fetch;
  const warn = onceEach(options.onWarning);
  const servers = new Map<string, ServerOnTheWire>();
  const serverAt = (url: string): ServerOnTheWire => {
    const where = url.split(/[?#]/)[0] ?? url;
    const server = servers.get(where) ?? new ServerOnTheWire(warn, where);
    servers.set(where, server);
    return server;
  };
  return async (input, init) => {
    const message = typeof init?.body === 'string' ? jsonObject(init.body) : undefined;
    if (!message) return fetch(input, init);
    const server = serverAt(input instanceof Request ? input.url : String(input));
    const sent = server.keyed(message);
    const response = await fetch(input, sent === message ? init : { ...init, body: JSON.stringify(sent) });
    if (ASKS_CAPABILITIES.has(field(message, 'method')) && response.ok) {
      server.learn(await answerIn(response.clone()));
    }
    return response;
  };
}

/**
 * The JSON-RPC answer in a response: its JSON body, or the first answer among its server-sent
 * events (a 2025-11-25 server may answer initialize on an SSE stream). Read from a clone, up to
 * that answer and no further, so the stream the client reads is left alone.
 */
async function answerIn(response: Response): Promise<unknown> {
  if (!response.headers.get('content-type')?.includes('text/event-stream')) {
    return response.json().catch(() => undefined);
  }
  const reader = response.body?.pipeThrough(new TextDecoderStream()).getReader();
  if (!reader) return undefined;
  let buffered = '';
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return undefined;
      const lines = (buffered + value).split('\n');
      buffered = lines.pop() ?? '';
      for (const line of lines) {
        // The SDKs write each event's message on one `data:` line.
        const data = line.startsWith('data:') ? jsonObject(line.slice('data:'.length)) : undefined;
        if (data && 'result' in data) return data;
      }
    }
  } finally {
    void reader.cancel().catch(() => {});
  }
}

function jsonObject(text: string): object | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

// --- Any transport: stdio, or one the framework takes as an object ---

/**
 * What these wrappers need of a transport: the SDKs' (`@modelcontextprotocol/sdk`, `/client`)
 * and the AI SDK's (`MCPTransport`) all have it. (A method, so either's message type fits.)
 */
export interface MessageTransport {
  send(message: object, ...rest: never[]): Promise<void>;
}

/**
 * `transport`, changed in place and returned: every tools/call sent through it carries the key of
 * the tool call under way. Wrap it before the client connects: its `send`, and the `onmessage`
 * the client sets, to read the capabilities from the answer to initialize or server/discover.
 */
export function transportWithIdempotencyKeys<T extends MessageTransport>(
  transport: T,
  options: WireOptions = {},
): T {
  const server = new ServerOnTheWire(onceEach(options.onWarning));
  const asked = new Set<unknown>();
  const target: MessageTransport = transport;
  const send = transport.send.bind(transport);
  target.send = (message, ...rest) => {
    if (ASKS_CAPABILITIES.has(field(message, 'method'))) asked.add(field(message, 'id'));
    return send(server.keyed(message), ...rest);
  };
  // The client sets `onmessage` when it connects; every handler it sets reads through this.
  let onmessage: unknown = Reflect.get(transport, 'onmessage');
  Object.defineProperty(transport, 'onmessage', {
    configurable: true,
    enumerable: true,
    get: () => onmessage,
    set: (handler: unknown) => {
      onmessage =
        typeof handler === 'function'
          ? (message: unknown, ...rest: unknown[]) => {
              // An answer (no method) to a request of ours that asks for the capabilities.
              if (field(message, 'method') === undefined && asked.delete(field(message, 'id'))) {
                server.learn(message);
              }
              Reflect.apply(handler, transport, [message, ...rest]);
            }
          : handler;
    },
  });
  Reflect.set(transport, 'onmessage', onmessage);
  return transport;
}
