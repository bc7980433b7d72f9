// --- The provider's HTTP: reading a request (its key, its body, the body's fingerprint) and writing an answer ---

import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  type Answer,
  FAULT_KINDS,
  MAX_BODY_DEPTH,
  MAX_IDEMPOTENCY_KEY_LENGTH,
  MESSAGES,
  type Operation,
  type OperationPath,
  type OperationRequest,
  type QueuedFault,
  ROUTES,
  type RoutePath,
} from './provider-wire.js';

// --- Reading a request: the key, the body, its fingerprint ---

export function isRoute(path: string): path is RoutePath {
  return Object.hasOwn(ROUTES, path);
}

/**
 * The Idempotency-Key header's value, as sent: the draft makes it a Structured Field String, but the
 * wire compares the raw value, quotes and all, so any client's key works unchanged.
 */
export function idempotencyKeyOf(req: IncomingMessage): { value: string | undefined } | { error: string } {
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
export function parseOperation(
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

export function parseFault(body: Buffer): { path: OperationPath; fault: QueuedFault } | { error: string } {
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

export function parseJsonObject(body: Buffer): { value: Record<string, unknown> } | { error: string } {
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch {
    return { error: MESSAGES.notJson };
  }
  if (!isObject(value)) return { error: MESSAGES.notObject };
  return { value };
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The body as one canonical string (object keys sorted, no whitespace), so that two bodies that
 * parse to the same JSON value have one fingerprint, whatever their key order or spacing. The
 * draft's "Idempotency Fingerprint" allows any such function of the payload. Undefined past
 * MAX_BODY_DEPTH.
 */
export function canonicalJson(value: unknown, depth: number): string | undefined {
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
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer | undefined> {
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

export function jsonAnswer(status: number, value: unknown): Answer {
  return { status, body: Buffer.from(JSON.stringify(value)) };
}

export function send(res: ServerResponse, answer: Answer, headers: Record<string, string> = {}): void {
  res.writeHead(answer.status, {
    'content-type': 'application/json',
    'content-length': String(answer.body.length),
    ...headers,
  });
  res.end(answer.body);
}

export function sendJson(res: ServerResponse, status: number, value: unknown): void {
  send(res, jsonAnswer(status, value));
}

export function sendError(
  res: ServerResponse,
  status: number,
  type: string,
  message: string,
  headers: Record<string, string> = {},
): void {
  send(res, jsonAnswer(status, { error: { type, message } }), headers);
}
