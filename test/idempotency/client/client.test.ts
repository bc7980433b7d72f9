// IdempotentClient against the real demo server over stateless HTTP, in both protocol eras: the
// call site names a tool and its arguments; the key, its reuse across retries, and the decision
// not to retry are the wrapper's. The wire is read through the transport's fetch, the outcome
// through get_balance and the server's decision log.

import {
  type Client,
  SdkError,
  SdkErrorCode,
  StreamableHTTPClientTransport,
} from '@modelcontextprotocol/client';
import { createMcpHandler } from '@modelcontextprotocol/server';
import { IdempotencyErrorType, idempotencyErrorOf } from 'mcp-request-idempotency';
import {
  type Attempt,
  CAPABILITY_UNREAD_WARNING,
  callTool,
  callToolIdempotently,
  captureInitializeCapabilities,
  IdempotentClient,
  type IdempotentClientOptions,
  LEGACY_PROTOCOL_VERSION,
  NO_CAPABILITY_WARNING,
  NOT_RETRIED_WARNING,
  OutcomeUnknownError,
} from 'mcp-request-idempotency/client';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import {
  balanceOf,
  connectHttpClient,
  ERAS,
  type Era,
  type HttpInstance,
  newClient,
  resetLedger,
  startHttpInstance,
} from '../../../demo/processes/launch.js';
import { MemoryLedger } from '../../../ledger.js';
import { bareDemoServer } from '../../support/http.js';
import { errorFrom } from '../../support/sep-cases.js';

/** The provider's latency: long enough for a client to give up on a charge still running. */
const CHARGE_LATENCY_MS = 600;
/** A client that gives up well before the charge is done: its first answer is lost. */
const IMPATIENT = { timeoutMs: 150, initialBackoffMs: 50, maxBackoffMs: 100, maxAttempts: 30 };

type Fetch = (url: string | URL, init?: RequestInit) => Promise<Response>;
type Params = Record<string, unknown>;

/** The fetch a transport uses, recording the params of every tools/call it sends. */
interface Wire {
  fetch: Fetch;
  calls: Params[];
}

/**
 * `rewrite` changes a tools/call's params before they are sent (to meet a key the wrapper would
 * never choose); `lose` decides, after the server answered, that the answer never arrives, and how.
 */
function wire(
  next: Fetch = fetch,
  rewrite: (params: Params) => Params = (params) => params,
  lose: (params: Params) => Loss | undefined = () => undefined,
): Wire {
  const calls: Params[] = [];
  const recording: Fetch = async (url, init) => {
    const message: unknown = typeof init?.body === 'string' ? JSON.parse(init.body) : undefined;
    if (!isObject(message) || message.method !== 'tools/call' || !isObject(message.params))
      return next(url, init);
    const { params } = message;
    const sent = rewrite(params);
    // The 2026-07-28 envelope rides in `_meta` on every request; what is checked here is the rest.
    const { _meta: _envelope, ...call } = sent;
    calls.push(call);
    const response = await next(url, { ...init, body: JSON.stringify({ ...message, params: sent }) });
    const loss = lose(sent);
    if (loss === undefined) return response;
    await response.text(); // the server answered in full: it executed, and only the answer is lost
    if (loss === 'cut') throw new TypeError('fetch failed', { cause: new Error('other side closed') });
    if (loss === 'streamCut') {
      // The answer's headers came (200, and on 2025-11-25 an SSE stream), then the connection broke.
      const cut = new TypeError('terminated', { cause: new Error('other side closed') });
      const body = new ReadableStream<Uint8Array>({ start: (controller) => controller.error(cut) });
      return new Response(body, { status: response.status, headers: response.headers });
    }
    // A load balancer's answer when the server behind it broke off: not JSON-RPC, not the server's.
    return new Response(`<html>${loss} from the gateway</html>`, {
      status: loss,
      headers: { 'content-type': 'text/html' },
    });
  };
  return { fetch: recording, calls };
}

/**
 * How an answer the server gave is lost: the connection cut before the answer's headers, or after
 * them (`streamCut`), or a gateway's status in its place.
 */
type Loss = 'cut' | 'streamCut' | 502 | 503 | 504;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

const keysOf = (calls: Params[]) => calls.map((params) => params.idempotencyKey);

let instance: HttpInstance;
beforeAll(async () => {
  instance = await startHttpInstance(['--charge-latency-ms', String(CHARGE_LATENCY_MS)]);
});
afterAll(() => instance?.stop(5_000));

/** The server's decisions about `idempotencyKey`, in the order it logged them. */
async function decisionsFor(idempotencyKey: unknown): Promise<string[]> {
  return (await instance.decisions())
    .filter((d) => d.idempotencyKey === idempotencyKey)
    .map((d) => String(d.decision));
}

describe.each(ERAS)('IdempotentClient on %s, against the demo server', (era: Era) => {
  const opened: IdempotentClient[] = [];
  let plain: Client;
  beforeAll(async () => {
    plain = await connectHttpClient(instance.url, { era });
  });
  afterAll(async () => {
    await Promise.all([plain?.close(), ...opened.map((c) => c.close())]);
  });
  beforeEach(() => resetLedger(plain));

  async function connect(
    options: IdempotentClientOptions & { wire?: Wire } = {},
  ): Promise<{ shop: IdempotentClient; calls: Params[]; attempts: Attempt[]; warnings: string[] }> {
    const { wire: through = wire(), ...rest } = options;
    const attempts: Attempt[] = [];
    const warnings: string[] = [];
    const transport = new StreamableHTTPClientTransport(instance.url, { fetch: through.fetch });
    const shop = await IdempotentClient.connect(newClient(era), transport, {
      onAttempt: (a) => attempts.push(a),
      onWarning: (w) => warnings.push(w),
      ...rest,
    });
    opened.push(shop);
    return { shop, calls: through.calls, attempts, warnings };
  }

  describe('a call whose first answer is lost', () => {
    test('is retried with the same key and charges once', async () => {
      const { shop, calls, attempts, warnings } = await connect(IMPATIENT);
      const result = await shop.callTool('charge_guarded', { amount: 100 });
      expect(result.structuredContent).toStrictEqual({ charged: 100, balance: 100 });
      expect(attempts[0]?.outcome).toBe('timedOut');
      expect(calls.length).toBeGreaterThan(1);
      const [key] = keysOf(calls);
      expect(typeof key).toBe('string');
      expect(new Set(keysOf(calls))).toStrictEqual(new Set([key]));
      const decided = await decisionsFor(key);
      expect(decided.filter((d) => d === 'executed')).toHaveLength(1);
      expect(
        decided.filter((d) => d !== 'executed').every((d) => d === 'replayed' || d === 'inProgress'),
      ).toBe(true);
      expect(await balanceOf(plain)).toBe(100);
      expect(warnings).toStrictEqual([]);
    });

    test('meets the original in progress, and is retried until it replays', async () => {
      const { shop, attempts, calls } = await connect(IMPATIENT);
      const result = await shop.callTool('charge_guarded', { amount: 100 });
      const outcomes = attempts.map((a) => a.outcome);
      expect(outcomes[0]).toBe('timedOut');
      // Between them, in-progress answers; on a busy machine a retry may time out as well.
      const between = outcomes.slice(1, -1);
      expect(between.filter((o) => o !== 'inProgress' && o !== 'timedOut')).toStrictEqual([]);
      expect(between).toContain('inProgress');
      expect(outcomes.at(-1)).toBe('answered');
      const decided = await decisionsFor(keysOf(calls)[0]);
      expect(decided.at(-1)).toBe('replayed');
      expect(decided).toContain('inProgress');
      expect(decided.filter((d) => d === 'executed')).toHaveLength(1);
      expect(result.content).toStrictEqual([{ type: 'text', text: 'Charged 100. New balance: 100' }]);
      expect(await balanceOf(plain)).toBe(100);
    });

    test.each([
      ['over a connection cut after the server answered', 'cut', 'connectionLost'],
      ['over an answer stream cut before the answer', 'streamCut', 'connectionLost'],
      ['through a gateway answering 502 after the server charged', 502, 'gatewayError'],
      ['through a gateway answering 503 after the server charged', 503, 'gatewayError'],
      ['through a gateway answering 504 after the server charged', 504, 'gatewayError'],
    ] as const)('%s, is re-sent and replays', async (_, loss, outcome) => {
      let answers = 0;
      const lossy = wire(fetch, undefined, () => (++answers === 1 ? loss : undefined));
      // A third of the test's own bound: an attempt left to time out shows as `timedOut`.
      const { shop, attempts, calls } = await connect({ wire: lossy, timeoutMs: 10_000 });
      const result = await shop.callTool('charge_guarded', { amount: 100 });
      expect(attempts.map((a) => a.outcome)).toStrictEqual([outcome, 'answered']);
      expect(keysOf(calls)[1]).toBe(keysOf(calls)[0]);
      expect(await decisionsFor(keysOf(calls)[0])).toStrictEqual(['executed', 'replayed']);
      expect(result.structuredContent).toStrictEqual({ charged: 100, balance: 100 });
      expect(await balanceOf(plain)).toBe(100);
    });
  });

  describe('what one call adds to the client', () => {
    test('a key the caller chose (and stored before sending) is the key of every attempt', async () => {
      const idempotencyKey = crypto.randomUUID();
      const { shop, calls, attempts } = await connect(IMPATIENT);
      const own: Attempt[] = [];
      const result = await shop.callTool(
        'charge_guarded',
        { amount: 100 },
        { idempotencyKey, onAttempt: (a) => own.push(a) },
      );
      expect(result.structuredContent).toStrictEqual({ charged: 100, balance: 100 });
      expect(calls.length).toBeGreaterThan(1);
      expect(new Set(keysOf(calls))).toStrictEqual(new Set([idempotencyKey]));
      expect((await decisionsFor(idempotencyKey)).filter((d) => d === 'executed')).toHaveLength(1);
      // The call's own observer sees what the client's sees, this call's attempts only.
      expect(own).toStrictEqual(attempts);
      expect(await balanceOf(plain)).toBe(100);
    });

    test.each([
      ['between attempts', IMPATIENT],
      ['during an attempt', { ...IMPATIENT, timeoutMs: 5_000 }],
    ])(
      'an abort %s ends the retries: the call rejects with its reason, no attempt follows',
      async (when, policy) => {
        const { shop, calls } = await connect(policy);
        const stop = new AbortController();
        const reason = new Error('the user closed the checkout');
        const abort = () => stop.abort(reason);
        if (when === 'during an attempt') setTimeout(abort, CHARGE_LATENCY_MS / 4);
        const charging = shop.callTool(
          'charge_guarded',
          { amount: 100 },
          { signal: stop.signal, onAttempt: abort },
        );
        expect(await errorFrom(charging)).toBe(reason);
        // The first attempt's charge, already running, still completes, once; nothing is sent again.
        await new Promise((resolve) => setTimeout(resolve, 2 * CHARGE_LATENCY_MS));
        expect(await balanceOf(plain)).toBe(100);
        expect(calls).toHaveLength(1);
      },
    );
  });

  test('retries stop at maxAttempts: the key is handed back with the last answer, and a retry under it replays', async () => {
    const { shop, attempts, calls } = await connect({
      timeoutMs: 100,
      initialBackoffMs: 1,
      maxBackoffMs: 1,
      maxAttempts: 3,
    });
    const error = await errorFrom(shop.callTool('charge_guarded', { amount: 100 }));
    expect(attempts.map((a) => a.outcome)).toStrictEqual(['timedOut', 'inProgress', 'inProgress']);
    expect(calls).toHaveLength(3);
    const [key] = keysOf(calls);
    expect(new Set(keysOf(calls))).toStrictEqual(new Set([key]));
    expect(error).toBeInstanceOf(OutcomeUnknownError);
    const unsettled = error as OutcomeUnknownError;
    expect(unsettled).toMatchObject({ idempotencyKey: key, tool: 'charge_guarded', attempts: 3 });
    expect(unsettled.lastOutcome).toBe('inProgress');
    expect(idempotencyErrorOf(unsettled.cause)?.type).toBe(IdempotencyErrorType.inProgress);
    // The charge the first attempt started still completes, once; the application's retry under
    // the key it was handed is answered from its record.
    await new Promise((resolve) => setTimeout(resolve, CHARGE_LATENCY_MS));
    const later = await shop.callTool(
      'charge_guarded',
      { amount: 100 },
      { idempotencyKey: unsettled.idempotencyKey },
    );
    expect(later.structuredContent).toStrictEqual({ charged: 100, balance: 100 });
    expect((await decisionsFor(key)).filter((d) => d === 'executed')).toHaveLength(1);
    expect(await balanceOf(plain)).toBe(100);
  });

  test('get_balance, annotated readOnlyHint, is called once with no key', async () => {
    const { shop, calls, attempts } = await connect({ ...IMPATIENT, timeoutMs: 5_000 });
    const result = await shop.callTool('get_balance');
    expect(result.structuredContent).toStrictEqual({ balance: 0 });
    expect(calls).toStrictEqual([{ name: 'get_balance', arguments: {} }]);
    expect(attempts).toStrictEqual([]);
  });

  test('a conflict is the answer, not retried', async () => {
    const idempotencyKey = crypto.randomUUID();
    await callTool(plain, { name: 'charge_guarded', arguments: { amount: 1 }, idempotencyKey });
    const reused = wire(fetch, (params) => ({ ...params, idempotencyKey }));
    const { shop, calls } = await connect({ ...IMPATIENT, timeoutMs: 5_000, wire: reused });
    const error = await errorFrom(shop.callTool('charge_guarded', { amount: 2 }));
    expect(idempotencyErrorOf(error)).toMatchObject({ type: IdempotencyErrorType.conflict, idempotencyKey });
    expect(calls).toHaveLength(1);
    expect(await balanceOf(plain)).toBe(1);
  });

  test('an invalid key is the answer, not retried', async () => {
    const empty = wire(fetch, (params) => ({ ...params, idempotencyKey: '' }));
    const { shop, calls } = await connect({ ...IMPATIENT, timeoutMs: 5_000, wire: empty });
    const error = await errorFrom(shop.callTool('charge_guarded', { amount: 2 }));
    expect(idempotencyErrorOf(error)?.type).toBe(IdempotencyErrorType.invalid);
    expect(calls).toHaveLength(1);
    expect(await balanceOf(plain)).toBe(0);
  });

  test('a tool error result is the answer, not retried', async () => {
    const { shop, calls, attempts } = await connect({ ...IMPATIENT, timeoutMs: 5_000 });
    const result = await shop.callTool('charge_guarded', { amount: -1 });
    expect(result.isError).toBe(true);
    expect(attempts.map((a) => a.outcome)).toStrictEqual(['answered']);
    expect(calls).toHaveLength(1);
    expect(await balanceOf(plain)).toBe(0);
  });
});

// --- A server without the capability: the demo's tools on a bare McpServer, no guard ---

describe.each(ERAS)('callToolIdempotently on %s, against a server without the capability', (era: Era) => {
  /** The numbers: a 300 ms tool, a 100 ms timeout, eight attempts. */
  const POLICY = { timeoutMs: 100, maxAttempts: 8, initialBackoffMs: 10, maxBackoffMs: 20 };
  const TOOL_MS = 300;

  test('sends the call once and does not retry it: one operation, one charge', async () => {
    const ledger = new MemoryLedger(TOOL_MS);
    const handler = createMcpHandler(() => bareDemoServer(ledger));
    const bare = wire((url, init) => handler.fetch(new Request(url, init)));
    const client = newClient(era);
    await client.connect(
      new StreamableHTTPClientTransport(new URL('http://in-process/mcp'), { fetch: bare.fetch }),
    );
    try {
      const warnings: string[] = [];
      const attempts: Attempt[] = [];
      const error = await errorFrom(
        callToolIdempotently(
          client,
          { name: 'charge_guarded', arguments: { amount: 100 } },
          { policy: POLICY, onAttempt: (a) => attempts.push(a), onWarning: (w) => warnings.push(w) },
        ),
      );
      // The one attempt timed out; with nothing to promise a retry would not charge again, none is made.
      expect(error instanceof SdkError && error.code === SdkErrorCode.RequestTimeout).toBe(true);
      expect(bare.calls).toHaveLength(1);
      expect(attempts).toStrictEqual([]);
      await new Promise((resolve) => setTimeout(resolve, 2 * TOOL_MS));
      expect(await ledger.balance()).toBe(100);
      // 2026-07-28: server/discover says it does not deduplicate; 2025-11-25: it cannot be asked.
      expect(warnings).toStrictEqual([
        era === LEGACY_PROTOCOL_VERSION ? CAPABILITY_UNREAD_WARNING : NOT_RETRIED_WARNING,
      ]);
      // Told the capability as the server sent it, the answer is the same on either era.
      const told = await errorFrom(
        callToolIdempotently(
          client,
          { name: 'charge_guarded', arguments: { amount: 100 } },
          { policy: POLICY, serverCapabilities: { tools: {} }, onWarning: (w) => warnings.push(w) },
        ),
      );
      expect(told instanceof SdkError && told.code === SdkErrorCode.RequestTimeout).toBe(true);
      expect(bare.calls).toHaveLength(2);
      await new Promise((resolve) => setTimeout(resolve, 2 * TOOL_MS));
      expect(await ledger.balance()).toBe(200);
    } finally {
      await client.close();
      await handler.close();
    }
  });
});

describe.each(ERAS)('callToolIdempotently on %s, against the demo server', (era: Era) => {
  test('retries a lost answer under one key once it knows the server deduplicates: one charge', async () => {
    const transport = new StreamableHTTPClientTransport(instance.url);
    const client = newClient(era);
    // 2025-11-25: the capability as the initialize result carried it, which the SDK drops.
    const initialize = captureInitializeCapabilities(transport);
    await client.connect(transport);
    try {
      await resetLedger(client);
      const serverCapabilities = era === LEGACY_PROTOCOL_VERSION ? await initialize : undefined;
      const { result, attempts } = await callToolIdempotently(
        client,
        { name: 'charge_guarded', arguments: { amount: 100 } },
        { policy: IMPATIENT, serverCapabilities, onWarning: (w) => expect.fail(w) },
      );
      expect(attempts[0]?.outcome).toBe('timedOut');
      expect(attempts.at(-1)?.outcome).toBe('answered');
      expect(result.structuredContent).toStrictEqual({ charged: 100, balance: 100 });
      expect(await balanceOf(client)).toBe(100);
    } finally {
      await client.close();
    }
  });
});

describe.each(ERAS)('IdempotentClient on %s, against a server without the capability', (era: Era) => {
  test('sends no key, does not retry a lost answer, and warns once', async () => {
    const ledger = new MemoryLedger(CHARGE_LATENCY_MS);
    const handler = createMcpHandler(() => bareDemoServer(ledger));
    const bare = wire((url, init) => handler.fetch(new Request(url, init)));
    const warnings: string[] = [];
    const attempts: Attempt[] = [];
    const shop = await IdempotentClient.connect(
      newClient(era),
      new StreamableHTTPClientTransport(new URL('http://in-process/mcp'), { fetch: bare.fetch }),
      { ...IMPATIENT, onWarning: (w) => warnings.push(w), onAttempt: (a) => attempts.push(a) },
    );
    try {
      expect(shop.deduplicates).toBe(false);
      const error = await errorFrom(shop.callTool('charge_guarded', { amount: 100 }));
      expect(error instanceof SdkError && error.code === SdkErrorCode.RequestTimeout).toBe(true);
      expect(bare.calls).toStrictEqual([{ name: 'charge_guarded', arguments: { amount: 100 } }]);
      expect(attempts).toStrictEqual([]);
      await new Promise((resolve) => setTimeout(resolve, CHARGE_LATENCY_MS));
      expect(await ledger.balance()).toBe(100);
      expect(warnings).toStrictEqual([NO_CAPABILITY_WARNING]);
    } finally {
      await shop.close();
      await handler.close();
    }
  });
});
