// --- A server the checker's units can talk to in process: a counter tool behind a key store ---
//
// Correct by default (records scoped per caller, fingerprinted by parsed value, a duplicate in
// progress refused at once); each option turns on one flaw the SEP forbids. Its `Peer`s answer the
// checker's hand-written params as a server on the wire would, with no process and no socket.

import type { Call } from '../../packages/checker/run.js';
import { type Answer, LEGACY_PROTOCOL_VERSION, type Peer } from '../../packages/checker/wire.js';

/** A call as the checker records it, from the JSON-RPC `result` or `error` it carried. */
export function callOf(member: { result: unknown } | { error: unknown }, http?: Answer['http']): Call {
  const message = { jsonrpc: '2.0', id: 1, ...member };
  const answer: Answer = { text: JSON.stringify(message), message, at: 0, ...(http && { http }) };
  if ('error' in member) return { answer, sentAt: 0, kind: 'error', value: member.error };
  const isError = (member.result as { isError?: unknown } | null)?.isError === true;
  return { answer, sentAt: 0, kind: isError ? 'tool error' : 'success', value: member.result };
}

/** A result with one text content. */
export const text = (t: string, isError = false) =>
  callOf({ result: { content: [{ type: 'text', text: t }], ...(isError && { isError }) } });

/** A JSON-RPC error, its `data.type` set when given. */
export const rpcError = (code: number, message: string, type?: string, idempotencyKey?: string) =>
  callOf({ error: { code, message, ...(type && { data: { type, idempotencyKey } }) } });

export interface Flaws {
  /** Declare no `tools.idempotency`. */
  noCapability?: boolean;
  /** Ignore `idempotencyKey`: every call executes. */
  ignoreKeys?: boolean;
  /** Fingerprint the arguments as `JSON.stringify` writes them: key order matters. */
  keyOrderMatters?: boolean;
  /** Look keys up in lower case, as a case-insensitive collation does. */
  foldKeyCase?: boolean;
  /** Run a request that conflicts with its key's record, and answer with the conflict error. */
  conflictExecutes?: boolean;
  /** One store for every caller. */
  unscoped?: boolean;
  /** Replay a stored result before asking whether the caller may call the tool. */
  replayBeforeAuthorization?: boolean;
  /** Replay a key's record whatever the request: no fingerprint. */
  noFingerprint?: boolean;
  /** Refuse every key this says no to, as a server with limits of its own on keys may. */
  acceptKey?: (key: string) => boolean;
  /** Hold a duplicate until its original ends, then replay it. */
  holdDuplicate?: boolean;
}

/** A charge above this is declined: a tool error whose decline number counts executions. */
const DECLINE_ABOVE = 100;

interface Record {
  fingerprint: string;
  done: Promise<unknown>;
  result?: unknown;
}

/** The server: its counters, its records, and every request it was sent, as sent. */
export class Model {
  executions = 0;
  declines = 0;
  readonly sent: { method: string; params: string }[] = [];
  readonly #records = new Map<string, Record>();

  constructor(
    readonly flaws: Flaws = {},
    /** `{"slow":true}` in the arguments makes a call take this long. */
    readonly slowMs = 400,
  ) {}

  /** A connection of `caller`; a `forbidden` one may not call the tools. */
  peer(caller = 'alice', forbidden = false): Peer {
    const capabilities = this.flaws.noCapability ? { tools: {} } : { tools: { idempotency: {} } };
    let id = 0;
    return {
      era: LEGACY_PROTOCOL_VERSION,
      capabilities,
      discoveredBy: 'initialize',
      close: async () => {},
      request: async (method, params) => {
        this.sent.push({ method, params });
        const member = await this.#answer(method, JSON.parse(params), caller, forbidden);
        const message = { jsonrpc: '2.0', id: ++id, ...member };
        return { text: JSON.stringify(message), message, at: performance.now() };
      },
    };
  }

  async #answer(method: string, params: Params, caller: string, forbidden: boolean) {
    if (method !== 'tools/call') return { result: { tools: [] } };
    const refusal = { error: { code: -32003, message: `${caller} may not call ${params.name}` } };
    if (forbidden && !this.flaws.replayBeforeAuthorization) return refusal;
    const key = params.idempotencyKey;
    if (key === undefined || this.flaws.ignoreKeys) return forbidden ? refusal : this.#execute(params);
    if (this.flaws.acceptKey?.(key) === false)
      return { error: { code: -32602, message: 'idempotencyKey: not taken' } };
    const scoped = `${this.flaws.unscoped ? '' : caller}/${this.flaws.foldKeyCase ? key.toLowerCase() : key}`;
    const fingerprint = `${params.name} ${this.flaws.keyOrderMatters ? JSON.stringify(params.arguments ?? {}) : sorted(params.arguments ?? {})}`;
    const record = this.#records.get(scoped);
    if (!record) {
      if (forbidden) return refusal;
      const done = this.#execute(params);
      const fresh: Record = { fingerprint, done };
      this.#records.set(scoped, fresh);
      fresh.result = await done;
      return fresh.result as object;
    }
    if (record.fingerprint !== fingerprint && !this.flaws.noFingerprint) {
      if (this.flaws.conflictExecutes) await this.#execute(params);
      return idempotency(-32602, 'idempotency_key_conflict', key);
    }
    if (record.result === undefined && !this.flaws.holdDuplicate)
      return idempotency(-32000, 'idempotency_key_in_progress', key);
    return (await record.done) as object;
  }

  async #execute(params: Params) {
    const args = (params.arguments ?? {}) as { amount?: number; slow?: boolean };
    if (args.slow) await new Promise((resolve) => setTimeout(resolve, this.slowMs));
    if ((args.amount ?? 0) > DECLINE_ABOVE) {
      this.declines += 1;
      return { result: { content: [{ type: 'text', text: `Declined #${this.declines}` }], isError: true } };
    }
    this.executions += 1;
    return { result: { content: [{ type: 'text', text: `${params.name}: executions ${this.executions}` }] } };
  }
}

type Params = { name: string; arguments?: unknown; idempotencyKey?: string };

const idempotency = (code: number, type: string, idempotencyKey: string) => ({
  error: { code, message: type, data: { type, idempotencyKey } },
});

/** The arguments as one parsed value: members sorted at every depth. */
function sorted(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(sorted).join(',')}]`;
  if (typeof value !== 'object' || value === null) return JSON.stringify(value);
  const entries = Object.entries(value).sort(([a], [b]) => (a < b ? -1 : 1));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${sorted(v)}`).join(',')}}`;
}
