// --- Garbage for the wire, and the means to tell whether the server survived it ---
//
// Random mutations of valid `tools/call` requests (fields replaced by values of the wrong
// type, removed, added; the JSON text truncated or corrupted), an oracle for what a JSON-RPC
// 2.0 peer owes each line, a tally of what a run of them charged, and the server process's
// resident memory as Linux reports it.

import { readFileSync } from 'node:fs';
import { isJSONRPCNotification, isJSONRPCRequest } from '@modelcontextprotocol/client';
import fc from 'fast-check';

// --- Mutations ---

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Values of every type and a few with meaning here: wrong types, edge numbers, hostile strings. */
const hostileValue: fc.Arbitrary<Json> = fc.oneof(
  fc.constantFrom<Json>(null, '', 0, -1, 1.5, 2 ** 53, true, [], {}, '2.0', '1.0'),
  fc.constantFrom<Json>(
    'tools/call',
    'tools/list',
    'ping',
    'charge_guarded',
    'charge_unguarded',
    'get_balance',
  ),
  fc.constantFrom<Json>('\u0000', 'a\nb', '\ud800', '\udc00x', '\u202e', '🔑'.repeat(300), 'x'.repeat(256)),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.jsonValue({ maxDepth: 2 }).map((v): Json => JSON.parse(JSON.stringify(v))),
);

const FIELDS = [
  ['jsonrpc'],
  ['id'],
  ['method'],
  ['params'],
  ['params', 'name'],
  ['params', 'arguments'],
  ['params', 'arguments', 'amount'],
  ['params', 'idempotencyKey'],
  ['params', '_meta'],
  ['params', 'extra'],
  ['extra'],
] as const;

type Edit =
  | { kind: 'set'; path: readonly string[]; value: Json }
  | { kind: 'delete'; path: readonly string[] }
  | { kind: 'truncate'; at: number }
  | { kind: 'insert'; at: number; text: string }
  | { kind: 'replace'; at: number; text: string }
  | { kind: 'repeat'; at: number; length: number };

const structuralEdit: fc.Arbitrary<Edit> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({ kind: fc.constant('set'), path: fc.constantFrom(...FIELDS), value: hostileValue }),
  },
  fc.record({ kind: fc.constant('delete'), path: fc.constantFrom(...FIELDS) }),
);

/** Positions are fractions of the text's length, so they shrink and apply to any text. */
const textEdit: fc.Arbitrary<Edit> = fc.oneof(
  fc.record({ kind: fc.constant('truncate'), at: fc.nat(999) }),
  fc.record({
    kind: fc.constant('insert'),
    at: fc.nat(999),
    text: fc.string({ unit: 'binary', minLength: 1, maxLength: 3 }),
  }),
  fc.record({
    kind: fc.constant('replace'),
    at: fc.nat(999),
    text: fc.constantFrom('"', '{', '}', ',', ':', '\\', ']', '0', 'x', '\u0000', '\ud800'),
  }),
  fc.record({ kind: fc.constant('repeat'), at: fc.nat(999), length: fc.integer({ min: 1, max: 30 }) }),
);

export interface Mutation {
  /** The request before mutating. */
  base: Record<string, Json>;
  edits: Edit[];
  /** The line as sent (no newline in it). */
  line: string;
}

export function describeMutation(m: Mutation): string {
  return `${m.line.slice(0, 300)}${m.line.length > 300 ? '…' : ''}  (edits: ${JSON.stringify(m.edits).slice(0, 300)})`;
}

/**
 * A valid keyed or unkeyed `tools/call`, then one to three edits. Keys come either fresh or
 * from a pool of two, so some mutants replay or conflict with an earlier one.
 */
export function mutations(idBase: number): fc.Arbitrary<Mutation> {
  return fc
    .record({
      id: fc.nat(1_000_000).map((n) => idBase + n),
      name: fc.constantFrom('charge_guarded', 'charge_unguarded', 'get_balance'),
      // Often the same small amounts, so a shared key meets its own request again (a replay).
      amount: fc.oneof(fc.constantFrom(1, 5), fc.integer({ min: 1, max: 1000 })),
      key: fc.oneof(fc.constant(undefined), fc.uuid(), fc.constantFrom('shared-1', 'shared-2')),
      edits: fc.array(fc.oneof({ weight: 3, arbitrary: structuralEdit }, textEdit), {
        minLength: 1,
        maxLength: 3,
      }),
    })
    .map(({ id, name, amount, key, edits }) => {
      const params: Record<string, Json> = { name, arguments: { amount } };
      if (key !== undefined) params.idempotencyKey = key;
      const base: Record<string, Json> = { jsonrpc: '2.0', id, method: 'tools/call', params };
      return { base, edits, line: applyEdits(base, edits) };
    });
}

function applyEdits(base: Record<string, Json>, edits: Edit[]): string {
  const value: Json = structuredClone(base);
  for (const edit of edits) {
    // A copy: fast-check may hand two edits the same object, and setting it inside itself
    // would make the request circular, which no wire can carry.
    if (edit.kind === 'set') setPath(value, edit.path, structuredClone(edit.value));
    if (edit.kind === 'delete') deletePath(value, edit.path);
  }
  let text = JSON.stringify(value);
  for (const edit of edits) {
    const at = edit.kind === 'set' || edit.kind === 'delete' ? 0 : Math.floor((edit.at / 1000) * text.length);
    if (edit.kind === 'truncate') text = text.slice(0, at);
    if (edit.kind === 'insert') text = text.slice(0, at) + edit.text + text.slice(at);
    if (edit.kind === 'replace') text = text.slice(0, at) + edit.text + text.slice(at + 1);
    if (edit.kind === 'repeat') text = text.slice(0, at) + text.slice(at, at + edit.length) + text.slice(at);
  }
  // One mutant, one line: a raw line break would make it two requests.
  return text.replace(/[\r\n]/g, ' ');
}

function setPath(root: Json, path: readonly string[], value: Json): void {
  const parent = walk(root, path.slice(0, -1));
  const last = path.at(-1);
  if (parent && last !== undefined) parent[last] = value;
}

function deletePath(root: Json, path: readonly string[]): void {
  const parent = walk(root, path.slice(0, -1));
  const last = path.at(-1);
  if (parent && last !== undefined) delete parent[last];
}

function walk(root: Json, path: readonly string[]): { [key: string]: Json } | undefined {
  let node: Json | undefined = root;
  for (const step of path) node = isObject(node) ? node[step] : undefined;
  return isObject(node) ? node : undefined;
}

function isObject(value: unknown): value is { [key: string]: Json } {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

// --- What a JSON-RPC 2.0 peer owes a line ---

export type Owed =
  /** A request: exactly one answer, carrying its id. */
  | { kind: 'answer'; id: string | number }
  /** A JSON array: a batch, which MCP 2025-11-25 no longer has; refused or served, never ignored. */
  | { kind: 'batch' }
  /** A notification or a response: no answer. */
  | { kind: 'nothing' }
  /** Nothing but whitespace: not a message at all. Over stdio no answer; an empty HTTP body is refused. */
  | { kind: 'blank' }
  /** Not a JSON-RPC message: one error answer, with its id if one could be read, else null. */
  | { kind: 'error'; id: string | number | null };

/** Judged by the MCP schema (as the SDK ships it) on the text exactly as the server decodes it. */
export function owed(line: string): Owed {
  const decoded = Buffer.from(line, 'utf8').toString('utf8');
  if (decoded.trim() === '') return { kind: 'blank' };
  let value: unknown;
  try {
    value = JSON.parse(decoded);
  } catch {
    return { kind: 'error', id: null };
  }
  if (Array.isArray(value)) return { kind: 'batch' };
  if (isJSONRPCRequest(value)) return { kind: 'answer', id: value.id };
  if (isJSONRPCNotification(value)) return { kind: 'nothing' };
  if (typeof value === 'object' && value !== null && ('result' in value || 'error' in value)) {
    return { kind: 'nothing' };
  }
  const id: unknown = typeof value === 'object' && value !== null ? Reflect.get(value, 'id') : undefined;
  return {
    kind: 'error',
    id: typeof id === 'string' || (typeof id === 'number' && Number.isSafeInteger(id)) ? id : null,
  };
}

// --- What a run of calls charged ---

/**
 * Follows the balance through charge answers alone: an answer that charged says so with the
 * balance after it; any other `Charged` answer must be a byte-for-byte repeat of an earlier
 * one (a replay). A charge that was never reported shows up as a balance that is off.
 */
export class ChargeTally {
  balance = 0;
  fresh = 0;
  replays = 0;
  private readonly seen = new Set<string>();

  /** Returns why the answer cannot be right, or undefined. */
  observe(result: unknown): string | undefined {
    const content = isObject(result) ? result.structuredContent : undefined;
    const charged = isObject(content) ? content.charged : undefined;
    const balance = isObject(content) ? content.balance : undefined;
    if (typeof charged !== 'number' || typeof balance !== 'number') return undefined;
    const bytes = JSON.stringify(result);
    if (balance === this.balance + charged) {
      this.balance = balance;
      this.fresh += 1;
    } else if (this.seen.has(bytes)) {
      this.replays += 1;
    } else {
      return `charged ${charged} to a balance of ${this.balance} and reported ${balance}, and it is no replay`;
    }
    this.seen.add(bytes);
    return undefined;
  }
}

// --- Memory, as the kernel counts it ---

/** Resident set size of a process in MiB, from /proc/<pid>/status (VmRSS). */
export function rssMiB(pid: number): number {
  const match = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!match?.[1]) throw new Error(`no VmRSS for process ${pid}`);
  return Number(match[1]) / 1024;
}

// --- Requests over HTTP, sent as they are ---

/**
 * POSTs `body` (a string, sent as is) to an MCP endpoint with the two headers every client request
 * carries, and `headers` besides; given `timeoutMs`, gives up after it.
 */
export function postMcp(
  url: URL,
  body: string,
  headers: Record<string, string> = {},
  timeoutMs?: number,
): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...headers,
    },
    body,
    signal: timeoutMs === undefined ? undefined : AbortSignal.timeout(timeoutMs),
  });
}

/**
 * POSTs `body` as it is and returns the status and the JSON-RPC answer's text. The SDK answers a
 * 2025-era request as a one-event SSE stream; the answer is that event's data, byte for byte.
 */
export async function postRaw(
  url: URL,
  body: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; text: string }> {
  const response = await postMcp(url, body, headers, 10_000);
  return { status: response.status, text: await jsonRpcText(response) };
}

/** The JSON-RPC message an HTTP response carries: its JSON body, or its SSE stream's message event. */
export async function jsonRpcText(response: Response): Promise<string> {
  const text = await response.text();
  if (!response.headers.get('content-type')?.startsWith('text/event-stream')) return text;
  const messages = text
    .split('\n\n')
    .map((event) => event.split('\n'))
    .filter((lines) => lines.includes('event: message'))
    .map((lines) =>
      lines
        .filter((line) => line.startsWith('data: '))
        .map((line) => line.slice(6))
        .join('\n'),
    );
  const [message, ...more] = messages;
  if (message === undefined || more.length > 0) {
    throw new Error(
      `expected one JSON-RPC message in the SSE stream, got ${messages.length}: ${text.slice(0, 200)}`,
    );
  }
  return message;
}
