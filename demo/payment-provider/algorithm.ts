// --- The provider: its state, and the algorithm ---
//
// `Provider.perform` reads top to bottom as the algorithm: validate → look up the key → mismatch?
// → in flight? → execute → store → answer. Executing a charge over the demo's limit
// (`CHARGE_LIMIT` in ledger.ts) declines it, numbered: a 402 stored under its key like a receipt.

import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { CHARGE_LIMIT, declineMessage, declines } from '../../ledger.js';
import {
  type Answer,
  type Commit,
  ERROR_TYPES,
  type HeldResponse,
  ID_PREFIXES,
  type KeyRecord,
  MAX_BODY_BYTES,
  MESSAGES,
  OPERATIONS,
  type Operation,
  type OperationPath,
  type OperationRequest,
  type QueuedFault,
  RETRY_AFTER_SECONDS,
  ROUTES,
  SWEEP_INTERVAL_MS,
} from './provider-wire.js';
import {
  idempotencyKeyOf,
  isRoute,
  jsonAnswer,
  parseFault,
  parseOperation,
  readBody,
  send,
  sendError,
  sendJson,
} from './requests.js';

export class Provider {
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
