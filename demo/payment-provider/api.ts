// --- The payment provider, as its own process ---
//
// A stand-in for a payment API that honours the `Idempotency-Key` request header the way the IETF
// draft "The Idempotency-Key HTTP Header Field" (draft-ietf-httpapi-idempotency-key-header) asks,
// with Stripe's choices where the draft leaves one open. The wire it serves is
// docs/provider-wire.md: that document is the contract, and any process that follows it can take
// this one's place. Everything lives in this one process: the balance, the key records, the commit
// log, the queued faults and the held responses.
//
//   npx tsx demo/payment-provider/api.ts --host 127.0.0.1 --port 0 [--latency-ms N] [--key-retention-seconds N]
//
// or, embedded: `const provider = await startProvider({ port: 0 })`, then `provider.close()`.
//
// `Provider.perform` is the mechanism, and reads top to bottom as the algorithm:
// validate → look up the key → mismatch? → in flight? → execute → store → answer. Executing a
// charge over the demo's limit (`CHARGE_LIMIT` in ledger.ts) declines it, numbered: a 402 stored
// under its key like a receipt.
//
// What a stand-in may skip and a real provider must not (don't copy these three):
// - An in-progress record here never expires: it lives in this process with the request it marks,
//   which forgets it on every way out. Records kept in a shared store outlive a crashed process,
//   so there an in-progress record needs a lease, renewed while the request runs (the MCP guard's
//   stores do exactly that).
// - Keys are scoped to the path only: this provider has one caller, the demo server. The draft
//   asks that a key be scoped to its client too (per API key or account), or one client's key
//   replays another's charge.
// - /reset, /faults, /release, /commits and /held answer anyone who can reach the port: they are
//   the tests' controls, for a provider bound to loopback (the default) and nowhere else.

import { createHash, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { CHARGE_LIMIT, declineMessage, declines } from '../../ledger.js';

// --- Limits and defaults, each with its reason ---

/**
 * Largest body read; past it the answer is 413. A charge is a few dozen bytes: 64 KiB is generous
 * and keeps a flood of big bodies cheap to refuse.
 */
export const MAX_BODY_BYTES = 64 * 1024;

/** Longest key accepted: Stripe's limit, room for any UUID, ULID or hash a client would send. */
export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;

/**
 * How long a key's record is kept unless told otherwise: Stripe's 24 hours. The draft leaves the
 * expiry policy to the resource and asks that it be published ("Idempotency Key Validity and Expiry").
 */
export const DEFAULT_KEY_RETENTION_SECONDS = 24 * 60 * 60;

/** What a 409 asks the client to wait: a request here is processed in well under a second. */
const RETRY_AFTER_SECONDS = 1;

/**
 * How often expired records are swept out. Lookups already ignore a record the moment it expires;
 * the sweep is what bounds memory to one retention window's worth of keys.
 */
const SWEEP_INTERVAL_MS = 60_000;

/**
 * Deepest JSON a body may nest. A charge is flat; the fingerprint walks the body recursively, and a
 * 64 KiB body could nest 30 000 levels, deep enough to overflow the stack.
 */
const MAX_BODY_DEPTH = 64;

// --- What the provider says: error types (the wire's) and messages, in one place ---

/** The `error.type` strings of the wire. Tests import these rather than spell them again. */
export const ERROR_TYPES = {
  invalidRequest: 'invalid_request',
  invalidIdempotencyKey: 'invalid_idempotency_key',
  declined: 'card_declined',
  mismatch: 'idempotency_key_mismatch',
  inUse: 'idempotency_key_in_use',
  badGateway: 'bad_gateway',
  internal: 'internal_error',
  notFound: 'not_found',
  methodNotAllowed: 'method_not_allowed',
  tooLarge: 'request_too_large',
} as const;

const MESSAGES = {
  notJson: 'The body is not JSON.',
  notObject: 'The body must be a JSON object.',
  tooDeep: `The body nests deeper than ${MAX_BODY_DEPTH} levels.`,
  amount: 'amount must be a positive integer (minor units) no larger than 9007199254740991.',
  orderId: 'orderId must be a non-empty string.',
  balanceRange: 'This would take the balance past 9007199254740991 either way; nothing was committed.',
  keyEmpty: 'The Idempotency-Key header is empty; send a unique value, or no header at all.',
  keyTooLong: `The Idempotency-Key header is longer than ${MAX_IDEMPOTENCY_KEY_LENGTH} characters.`,
  keyTwice: 'Send one Idempotency-Key header, not several.',
  mismatch: 'This Idempotency-Key was used with a different body. A new request needs a new key.',
  inUse: 'A request with this Idempotency-Key is still being processed. Retry once it has finished.',
  badGateway: 'The provider could not be reached (a fault the test queued).',
  internal: 'The provider failed before committing anything (a fault the test queued).',
  resetMidway: 'The provider was reset while this request was being processed; nothing was committed.',
  unexpected: 'The provider failed unexpectedly; see its stderr.',
  tooLarge: `The body is larger than ${MAX_BODY_BYTES} bytes.`,
  notFound: (path: string) => `Nothing is served at ${path}.`,
  methodNotAllowed: (method: string, path: string, allowed: string) =>
    `${path} answers ${allowed}, not ${method}.`,
  faultPath: 'path must be "/charges" or "/refunds".',
  faultKind: (kinds: readonly string[]) => `fault must be one of ${kinds.map((k) => `"${k}"`).join(', ')}.`,
  faultCount: 'count must be a positive integer.',
  faultDelay: 'delayMs must be a non-negative integer.',
  faultDelayOnlyForDelay: 'delayMs goes with the "delay" fault only.',
  garbage: '<html>oops',
} as const;

// --- The wire's shapes ---

/** The paths this provider serves, and the one method each answers. */
const ROUTES = {
  '/charges': 'POST',
  '/refunds': 'POST',
  '/balance': 'GET',
  '/reset': 'POST',
  '/commits': 'GET',
  '/faults': 'POST',
  '/release': 'POST',
  '/held': 'GET',
} as const;
type RoutePath = keyof typeof ROUTES;

/** The two operations that move money, by path: the only ones an Idempotency-Key applies to. */
const OPERATIONS = { '/charges': 'charge', '/refunds': 'refund' } as const;
type OperationPath = keyof typeof OPERATIONS;
type Operation = (typeof OPERATIONS)[OperationPath];

const ID_PREFIXES: Record<Operation, string> = { charge: 'ch', refund: 're' };

export const FAULT_KINDS = [
  'drop-after-commit',
  '502-before-commit',
  '502-after-commit',
  '500-before-commit',
  'garbage-after-commit',
  'hold-after-commit',
  'delay',
] as const;
type FaultKind = (typeof FAULT_KINDS)[number];

interface QueuedFault {
  kind: FaultKind;
  /** How many more requests this entry fails. */
  remaining: number;
  delayMs: number;
}

/** An operation's request, once its body has passed validation. */
interface OperationRequest {
  amount: number;
  orderId?: string;
}

/** A status and the exact bytes of a body: what is stored, and replayed byte for byte. */
interface Answer {
  status: number;
  body: Buffer;
}

/**
 * What the provider remembers about a key. `inProgress` from the moment the first request with the
 * key is accepted until it commits (or fails before committing, which forgets the key);
 * `completed` from its commit until `expiresAt`.
 */
type KeyRecord =
  | { state: 'inProgress'; fingerprint: string }
  | { state: 'completed'; fingerprint: string; answer: Answer; expiresAt: number };

interface Commit {
  seq: number;
  id: string;
  operation: Operation;
  amount: number;
  orderId?: string;
  idempotencyKey: string | null;
}

interface HeldResponse {
  res: ServerResponse;
  answer: Answer;
}

export interface ProviderOptions {
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  /** How long every charge and refund takes between arriving and committing. */
  latencyMs?: number;
  /** How long a key's record is kept after its commit; DEFAULT_KEY_RETENTION_SECONDS unless set. */
  keyRetentionSeconds?: number;
}

export interface RunningProvider {
  /** `http://host:port`, no trailing slash. */
  url: string;
  close(): Promise<void>;
}

// --- The provider: state, and the algorithm ---

class Provider {
  private balance = 0;
  /** Charges declined since the last reset: each decline's number, as the demo's ledgers count them. */
  private declines = 0;
  /**
   * Key records, one map per path: a key is scoped to the operation it was sent to, so a key used
   * on /charges and on /refunds are two records (the draft's "Security Considerations" advise a
   * composite lookup key rather than the client's value alone).
   */
  private readonly records: Record<OperationPath, Map<string, KeyRecord>> = {
    '/charges': new Map(),
    '/refunds': new Map(),
  };
  private commits: Commit[] = [];
  private readonly faults: Record<OperationPath, QueuedFault[]> = { '/charges': [], '/refunds': [] };
  private readonly held = new Set<HeldResponse>();
  /**
   * Bumped by every reset. A request still being processed when the provider is reset must not
   * commit into the fresh state, or one test's leftover charge would land in the next one's balance.
   */
  private epoch = 0;
  /** Aborts every wait in progress when the provider closes, so nothing outlives it. */
  private readonly closing = new AbortController();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly latencyMs: number,
    private readonly retentionMs: number,
  ) {
    this.sweeper = setInterval(() => this.sweep(), Math.min(SWEEP_INTERVAL_MS, retentionMs));
    // A sweep is housekeeping: it must never keep the process alive on its own.
    this.sweeper.unref();
  }

  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    if (!isRoute(path)) return sendError(res, 404, ERROR_TYPES.notFound, MESSAGES.notFound(path));
    const allowed = ROUTES[path];
    if (req.method !== allowed) {
      return sendError(
        res,
        405,
        ERROR_TYPES.methodNotAllowed,
        MESSAGES.methodNotAllowed(req.method ?? '', path, allowed),
        { allow: allowed },
      );
    }
    const body = allowed === 'POST' ? await readBody(req, MAX_BODY_BYTES) : Buffer.alloc(0);
    if (body === undefined) return sendError(res, 413, ERROR_TYPES.tooLarge, MESSAGES.tooLarge);

    switch (path) {
      case '/charges':
      case '/refunds':
        return this.perform(path, req, res, body);
      case '/balance':
        return sendJson(res, 200, { balance: this.balance });
      case '/reset':
        this.reset();
        return sendJson(res, 200, { balance: this.balance });
      case '/commits':
        return sendJson(res, 200, { commits: this.commits });
      case '/faults':
        return this.queueFault(res, body);
      case '/release':
        return sendJson(res, 200, { released: this.release() });
      case '/held':
        return sendJson(res, 200, { held: this.held.size });
    }
  }

  // --- A charge or a refund, under an optional Idempotency-Key (the draft's "Idempotency Enforcement") ---

  private async perform(
    path: OperationPath,
    req: IncomingMessage,
    res: ServerResponse,
    body: Buffer,
  ): Promise<void> {
    const operation = OPERATIONS[path];

    // 1. Validate the key, then the body. Neither refusal is stored (Stripe's choice): the client
    //    may correct the request and send it again under the same key, and it executes.
    const key = idempotencyKeyOf(req);
    if ('error' in key) return sendError(res, 400, ERROR_TYPES.invalidIdempotencyKey, key.error);
    const parsed = parseOperation(operation, body);
    if ('error' in parsed) return sendError(res, 400, ERROR_TYPES.invalidRequest, parsed.error);
    const { request, fingerprint } = parsed;
    const idempotencyKey = key.value;

    // 2. Look up the key. It may not look it, but this is safe from races: nothing from this lookup
    //    to marking the key in progress below awaits, and Node runs one request's code at a time,
    //    so two requests with one key cannot both get past it.
    const records = this.records[path];
    const record = idempotencyKey === undefined ? undefined : this.lookUp(records, idempotencyKey);
    if (record) {
      // 3. Same key, other body: 422, nothing executed (the draft's "Error Handling").
      if (record.fingerprint !== fingerprint) {
        return sendError(res, 422, ERROR_TYPES.mismatch, MESSAGES.mismatch);
      }
      // 4. Same key while the first request is still being processed: 409, and no correction is
      //    needed before retrying ("Concurrent Request" under "Idempotency Enforcement").
      if (record.state === 'inProgress') {
        return sendError(res, 409, ERROR_TYPES.inUse, MESSAGES.inUse, {
          'retry-after': String(RETRY_AFTER_SECONDS),
        });
      }
      // Same key, same body, completed: the result of the previously completed operation, the
      // stored bytes themselves (the draft's "Retry").
      return send(res, record.answer, { 'idempotent-replayed': 'true' });
    }

    // 5. Execute. From here the key is in progress; every way out before the commit forgets it, so
    //    a request that failed without committing may be retried under the same key.
    const inProgress: KeyRecord = { state: 'inProgress', fingerprint };
    if (idempotencyKey !== undefined) records.set(idempotencyKey, inProgress);
    const forget = () => {
      if (idempotencyKey !== undefined && records.get(idempotencyKey) === inProgress) {
        records.delete(idempotencyKey);
      }
    };
    // Only a request that executes consumes a fault: refusals and replays above never reach here.
    const fault = this.takeFault(path);
    const epoch = this.epoch;
    try {
      if (fault?.kind === 'delay') await this.wait(fault.delayMs);
      await this.wait(this.latencyMs);
    } catch {
      // The provider is closing; its connections are being destroyed with it.
      forget();
      return;
    }
    if (epoch !== this.epoch) {
      forget();
      return sendError(res, 500, ERROR_TYPES.internal, MESSAGES.resetMidway);
    }
    if (fault?.kind === '502-before-commit') {
      forget();
      return sendError(res, 502, ERROR_TYPES.badGateway, MESSAGES.badGateway);
    }
    if (fault?.kind === '500-before-commit') {
      forget();
      return sendError(res, 500, ERROR_TYPES.internal, MESSAGES.internal);
    }
    let answer: Answer;
    if (operation === 'charge' && declines(request.amount)) {
      // Declined: nothing commits, but the provider has decided, so the decline is the key's
      // answer, stored and replayed like a receipt (Stripe stores declines too).
      answer = this.decline(request.amount);
    } else {
      const balance = this.balance + (operation === 'charge' ? request.amount : -request.amount);
      if (!Number.isSafeInteger(balance)) {
        forget();
        return sendError(res, 400, ERROR_TYPES.invalidRequest, MESSAGES.balanceRange);
      }
      // The commit. It stands whatever becomes of the answer below, even if the client has already
      // gone: that is the failure an Idempotency-Key exists for.
      answer = this.commit(operation, request, balance, idempotencyKey);
    }

    // 6. Store the answer with the key, in the same synchronous step as the commit: there is no
    //    moment at which a retry could find the charge committed but the key still in progress.
    if (idempotencyKey !== undefined) {
      records.set(idempotencyKey, {
        state: 'completed',
        fingerprint,
        answer,
        expiresAt: performance.now() + this.retentionMs,
      });
    }

    // 7. Answer, or fail to, as a queued fault says.
    switch (fault?.kind) {
      case 'drop-after-commit':
        res.destroy();
        return;
      case '502-after-commit':
        return sendError(res, 502, ERROR_TYPES.badGateway, MESSAGES.badGateway);
      case 'garbage-after-commit':
        return send(
          res,
          { status: 200, body: Buffer.from(MESSAGES.garbage) },
          { 'content-type': 'text/html' },
        );
      case 'hold-after-commit':
        return this.hold(res, answer);
      default:
        return send(res, answer);
    }
  }

  /** Commits the operation at `balance`, logs it, and returns its receipt. */
  private commit(
    operation: Operation,
    request: OperationRequest,
    balance: number,
    idempotencyKey: string | undefined,
  ): Answer {
    this.balance = balance;
    const id = `${ID_PREFIXES[operation]}_${randomUUID().replaceAll('-', '')}`;
    this.commits.push({
      seq: this.commits.length + 1,
      id,
      operation,
      amount: request.amount,
      ...(request.orderId === undefined ? {} : { orderId: request.orderId }),
      idempotencyKey: idempotencyKey ?? null,
    });
    return jsonAnswer(200, { id, amount: request.amount, balance });
  }

  /** Counts a declined charge and returns the decline, numbered: nothing commits. */
  private decline(amount: number): Answer {
    this.declines += 1;
    const decline = this.declines;
    const message = declineMessage(amount, CHARGE_LIMIT, decline);
    return jsonAnswer(402, {
      error: { type: ERROR_TYPES.declined, message, amount, limit: CHARGE_LIMIT, decline },
    });
  }

  /** The key's record, unless it has expired (then it is forgotten, and the key is new again). */
  private lookUp(records: Map<string, KeyRecord>, key: string): KeyRecord | undefined {
    const record = records.get(key);
    if (record?.state === 'completed' && record.expiresAt <= performance.now()) {
      records.delete(key);
      return undefined;
    }
    return record;
  }

  private sweep(): void {
    const now = performance.now();
    for (const records of Object.values(this.records)) {
      for (const [key, record] of records) {
        if (record.state === 'completed' && record.expiresAt <= now) records.delete(key);
      }
    }
  }

  private async wait(ms: number): Promise<void> {
    if (ms > 0) await sleep(ms, undefined, { signal: this.closing.signal });
  }

  // --- Faults and held responses (test and demo helpers) ---

  private queueFault(res: ServerResponse, body: Buffer): void {
    const parsed = parseFault(body);
    if ('error' in parsed) {
      sendError(res, 400, ERROR_TYPES.invalidRequest, parsed.error);
      return;
    }
    const queue = this.faults[parsed.path];
    queue.push(parsed.fault);
    // What this path's next requests will meet: every fault still queued for it, this one included.
    sendJson(res, 200, { queued: queue.reduce((total, fault) => total + fault.remaining, 0) });
  }

  /** The next queued fault for `path`, used up by this request: faults queued earlier go first. */
  private takeFault(path: OperationPath): QueuedFault | undefined {
    const queue = this.faults[path];
    const fault = queue[0];
    if (fault === undefined) return undefined;
    fault.remaining -= 1;
    if (fault.remaining === 0) queue.shift();
    return fault;
  }

  private hold(res: ServerResponse, answer: Answer): void {
    const held = { res, answer };
    this.held.add(held);
    // A client that gives up waiting is no longer held: `GET /held` counts what is open now.
    res.once('close', () => this.held.delete(held));
  }

  /** Answers every held response with its stored answer; returns how many there were. */
  private release(): number {
    const released = [...this.held];
    this.held.clear();
    for (const { res, answer } of released) send(res, answer);
    return released.length;
  }

  private reset(): void {
    this.release();
    this.balance = 0;
    this.declines = 0;
    for (const records of Object.values(this.records)) records.clear();
    this.commits = [];
    for (const queue of Object.values(this.faults)) queue.length = 0;
    this.epoch += 1;
  }

  close(): void {
    this.closing.abort();
    clearInterval(this.sweeper);
  }
}

// --- Reading a request: the key, the body, its fingerprint ---

function isRoute(path: string): path is RoutePath {
  return Object.hasOwn(ROUTES, path);
}

/**
 * The Idempotency-Key header's value, as sent: the draft makes it a Structured Field String, but the
 * wire compares the raw value, quotes and all, so any client's key works unchanged.
 */
function idempotencyKeyOf(req: IncomingMessage): { value: string | undefined } | { error: string } {
  const values = req.headersDistinct['idempotency-key'];
  if (values === undefined) return { value: undefined };
  // Node would join two header lines into one "a, b" key that neither sender chose.
  if (values.length > 1) return { error: MESSAGES.keyTwice };
  const [value = ''] = values;
  if (value === '') return { error: MESSAGES.keyEmpty };
  if (value.length > MAX_IDEMPOTENCY_KEY_LENGTH) return { error: MESSAGES.keyTooLong };
  return { value };
}

/**
 * The body, validated for `operation`, and its fingerprint. Unknown fields are ignored by the
 * validation but are part of the fingerprint: the fingerprint is the whole parsed body.
 */
function parseOperation(
  operation: Operation,
  body: Buffer,
): { request: OperationRequest; fingerprint: string } | { error: string } {
  const parsed = parseJsonObject(body);
  if ('error' in parsed) return parsed;
  const { value } = parsed;
  const amount = value.amount;
  if (typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount <= 0) {
    return { error: MESSAGES.amount };
  }
  const request: OperationRequest = { amount };
  if (operation === 'refund') {
    const orderId = value.orderId;
    if (typeof orderId !== 'string' || orderId === '') return { error: MESSAGES.orderId };
    request.orderId = orderId;
  }
  const canonical = canonicalJson(value, 0);
  if (canonical === undefined) return { error: MESSAGES.tooDeep };
  return { request, fingerprint: createHash('sha256').update(canonical).digest('hex') };
}

function parseFault(body: Buffer): { path: OperationPath; fault: QueuedFault } | { error: string } {
  const parsed = parseJsonObject(body);
  if ('error' in parsed) return parsed;
  const { path, fault, count = 1, delayMs } = parsed.value;
  if (path !== '/charges' && path !== '/refunds') return { error: MESSAGES.faultPath };
  const kind = FAULT_KINDS.find((candidate) => candidate === fault);
  if (kind === undefined) return { error: MESSAGES.faultKind(FAULT_KINDS) };
  if (typeof count !== 'number' || !Number.isSafeInteger(count) || count < 1) {
    return { error: MESSAGES.faultCount };
  }
  if (kind !== 'delay' && delayMs !== undefined) return { error: MESSAGES.faultDelayOnlyForDelay };
  if (kind === 'delay' && (typeof delayMs !== 'number' || !Number.isSafeInteger(delayMs) || delayMs < 0)) {
    return { error: MESSAGES.faultDelay };
  }
  return { path, fault: { kind, remaining: count, delayMs: typeof delayMs === 'number' ? delayMs : 0 } };
}

function parseJsonObject(body: Buffer): { value: Record<string, unknown> } | { error: string } {
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch {
    return { error: MESSAGES.notJson };
  }
  if (!isObject(value)) return { error: MESSAGES.notObject };
  return { value };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The body as one canonical string (object keys sorted, no whitespace), so that two bodies that
 * parse to the same JSON value have one fingerprint, whatever their key order or spacing. The
 * draft's "Idempotency Fingerprint" allows any such function of the payload. Undefined past
 * MAX_BODY_DEPTH.
 */
function canonicalJson(value: unknown, depth: number): string | undefined {
  if (depth > MAX_BODY_DEPTH) return undefined;
  let parts: Array<string | undefined>;
  if (Array.isArray(value)) {
    parts = value.map((item) => canonicalJson(item, depth + 1));
  } else if (isObject(value)) {
    parts = Object.keys(value)
      .sort()
      .map((name) => {
        const inner = canonicalJson(value[name], depth + 1);
        return inner === undefined ? undefined : `${JSON.stringify(name)}:${inner}`;
      });
  } else {
    return JSON.stringify(value);
  }
  if (parts.some((part) => part === undefined)) return undefined;
  const joined = parts.join(',');
  return Array.isArray(value) ? `[${joined}]` : `{${joined}}`;
}

/**
 * The body, or undefined once it passes `limit` bytes. The rest of an oversized upload is read
 * and discarded rather than cut off, so the client can finish sending and read the 413.
 */
function readBody(req: IncomingMessage, limit: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    if (Number(req.headers['content-length']) > limit) {
      req.resume();
      return resolve(undefined);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        req.off('data', onData);
        req.resume();
        return resolve(undefined);
      }
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.once('end', () => resolve(Buffer.concat(chunks)));
    // A client gone mid-upload: there is nobody to answer (a no-op once the body has ended).
    req.once('close', () => reject(new Error('the client closed the connection before sending the body')));
  });
}

// --- Writing an answer ---

function jsonAnswer(status: number, value: unknown): Answer {
  return { status, body: Buffer.from(JSON.stringify(value)) };
}

function send(res: ServerResponse, answer: Answer, headers: Record<string, string> = {}): void {
  res.writeHead(answer.status, {
    'content-type': 'application/json',
    'content-length': String(answer.body.length),
    ...headers,
  });
  res.end(answer.body);
}

function sendJson(res: ServerResponse, status: number, value: unknown): void {
  send(res, jsonAnswer(status, value));
}

function sendError(
  res: ServerResponse,
  status: number,
  type: string,
  message: string,
  headers: Record<string, string> = {},
): void {
  send(res, jsonAnswer(status, { error: { type, message } }), headers);
}

// --- Running it: embedded, or as a process ---

export async function startProvider(options: ProviderOptions = {}): Promise<RunningProvider> {
  const host = options.host ?? '127.0.0.1';
  const latencyMs = options.latencyMs ?? 0;
  const retentionSeconds = options.keyRetentionSeconds ?? DEFAULT_KEY_RETENTION_SECONDS;
  if (!(latencyMs >= 0 && Number.isFinite(latencyMs))) {
    throw new Error(`latencyMs must be a non-negative number, got ${latencyMs}`);
  }
  // A retention of 0 would keep no key at all, and sweep in a busy loop.
  if (!(retentionSeconds > 0 && Number.isFinite(retentionSeconds))) {
    throw new Error(`keyRetentionSeconds must be a positive number, got ${retentionSeconds}`);
  }
  const provider = new Provider(latencyMs, retentionSeconds * 1000);
  const server = createServer((req, res) => {
    provider.handle(req, res).catch((error: unknown) => {
      // Stdout carries the listening line only; what went wrong goes to stderr.
      process.stderr.write(`provider: ${error instanceof Error ? error.message : String(error)}\n`);
      if (res.headersSent || res.destroyed) res.destroy();
      else sendError(res, 500, ERROR_TYPES.internal, MESSAGES.unexpected);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, resolve);
  });
  const { port } = addressOf(server.address());
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    close: async () => {
      provider.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}

function addressOf(address: string | AddressInfo | null): AddressInfo {
  if (address === null || typeof address === 'string') throw new Error(`not listening on TCP: ${address}`);
  return address;
}

/** A flag's value as a whole number no smaller than `min`, or an error naming the flag. */
function integerFlag(name: string, text: string | undefined, fallback: number, min: number): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(value) || value < min) {
    throw new Error(`--${name} must be a whole number ≥ ${min}, got "${text}"`);
  }
  return value;
}

async function main(args: string[]): Promise<void> {
  // Exit at once, with success: there is nothing to flush, the state is meant to be thrown away.
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => process.exit(0));
  const { values } = parseArgs({
    args,
    strict: true,
    options: {
      host: { type: 'string' },
      port: { type: 'string' },
      'latency-ms': { type: 'string' },
      'key-retention-seconds': { type: 'string' },
    },
  });
  const port = integerFlag('port', values.port, 0, 0);
  if (port > 65_535) throw new Error(`--port must be at most 65535, got ${port}`);
  const provider = await startProvider({
    host: values.host ?? '127.0.0.1',
    port,
    latencyMs: integerFlag('latency-ms', values['latency-ms'], 0, 0),
    keyRetentionSeconds: integerFlag(
      'key-retention-seconds',
      values['key-retention-seconds'],
      DEFAULT_KEY_RETENTION_SECONDS,
      1,
    ),
  });
  // The one line on stdout: whoever started the process reads the URL from it.
  process.stdout.write(`${JSON.stringify({ event: 'listening', url: provider.url })}\n`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv.slice(2)).catch((error: unknown) => {
    process.stderr.write(`provider: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(2);
  });
}
