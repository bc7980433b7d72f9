// What the guard decided, where operators look: mcp-request-idempotency/otel with the real
// OpenTelemetry SDK, no mock of it. A server started with `--metrics-port` is scraped over HTTP
// after the SEP's cases; the demo's HTTP serving runs in this process with the SDK's tracer, its
// spans exported in memory; and every exported byte is searched for the keys and principals that
// must never be in it.

import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { Client } from '@modelcontextprotocol/client';
import { SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import {
  InMemorySpanExporter,
  NodeTracerProvider,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-node';
import {
  type Claim,
  type ClaimTicket,
  createToolCallGuard,
  IdempotencyErrorType,
  idempotencyErrorOf,
  MemoryIdempotencyStore,
  StoreUnavailableError,
} from 'mcp-request-idempotency';
import { callTool, MODERN_PROTOCOL_VERSION } from 'mcp-request-idempotency/client';
import {
  IdempotencyAttributes,
  IdempotencyMetrics,
  observeIdempotency,
  scopedKeyDigest,
} from 'mcp-request-idempotency/otel';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningHttpServer, startHttpServer } from '../../../demo/hosting/http.js';
import { CALLER_SCOPES, DEMO_SCOPES, parseBearerTokens } from '../../../demo/hosting/scopes.js';
import { mcpRequestSpans } from '../../../demo/hosting/telemetry.js';
import { WAIT_MS } from '../../../demo/processes/bounds.js';
import {
  connectHttpClient,
  ERAS,
  type Era,
  type HttpInstance,
  postModern,
  startHttpInstance,
} from '../../../demo/processes/launch.js';
import {
  PROVIDER_IMPLEMENTATIONS,
  type ProviderProcess,
  startProviderProcess,
} from '../../../demo/processes/payment-provider.js';
import { decisionCounts, type Scrape, scrape, total } from '../../../demo/processes/scrape.js';
import { MemoryLedger } from '../../../ledger.js';
import { createDemoServer } from '../../../server.js';

const TOKENS = 'alice:token-alice,bob:token-bob';
const PRINCIPALS = ['alice', 'bob'];

/** Resolves once `ready()` holds, checking every 20 ms; a bound only something broken reaches. */
async function until(ready: () => Promise<boolean> | boolean, what: string): Promise<void> {
  const deadline = performance.now() + WAIT_MS;
  while (!(await ready())) {
    if (performance.now() > deadline) throw new Error(`still waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The secrets of a run: what no label, attribute or exported byte may ever hold. */
function leaksIn(exported: string, keys: readonly string[]): string[] {
  return [...keys, ...PRINCIPALS, 'token-alice', 'token-bob'].filter((secret) => exported.includes(secret));
}

describe('a server with --metrics-port, scraped over HTTP after the SEP cases', () => {
  let provider: ProviderProcess;
  let server: HttpInstance;
  let alice: Client;
  let scraped: Scrape;
  const keys: string[] = [];
  const keyed = (name: string, args: Record<string, unknown>) => {
    const idempotencyKey = randomUUID();
    keys.push(idempotencyKey);
    return { name, arguments: args, idempotencyKey };
  };

  beforeAll(async () => {
    // A payment provider in a process of its own: it can hold a charge's answer (so a duplicate
    // meets the original in progress) and answer garbage after committing (outcome unknown).
    provider = await startProviderProcess(PROVIDER_IMPLEMENTATIONS[0]?.command ?? []);
    server = await startHttpInstance(
      ['--metrics-port', '0', '--provider-url', provider.url, '--provider-timeout-ms', '60000'],
      { DEMO_BEARER_TOKENS: TOKENS },
    );
    alice = await connectHttpClient(server.url, { token: 'token-alice' });

    // Executed, replayed, conflict.
    const charge = keyed('charge_guarded', { amount: 100 });
    await callTool(alice, charge);
    await callTool(alice, charge);
    await callTool(alice, { ...charge, arguments: { amount: 999 } }).catch(() => {});
    // In progress: the original's answer is held at the provider while its duplicate arrives.
    await provider.queueFault({ path: '/charges', fault: 'hold-after-commit' });
    const held = keyed('charge_guarded', { amount: 200 });
    const original = callTool(alice, held);
    await until(async () => (await provider.held()) === 1, 'the provider to hold the charge');
    const duplicate = await callTool(alice, held).catch((error: unknown) => error);
    expect(idempotencyErrorOf(duplicate)?.type).toBe(IdempotencyErrorType.inProgress);
    await provider.release();
    await original;
    // Unrecorded: the provider committed and answered garbage; the retry executes, once.
    await provider.queueFault({ path: '/charges', fault: 'garbage-after-commit' });
    const unknown = keyed('charge_guarded', { amount: 300 });
    expect((await callTool(alice, unknown)).isError).toBe(true);
    await callTool(alice, unknown);
    // Another tool: executed, replayed, and a key that is no key.
    const read = keyed('get_balance', {});
    await callTool(alice, read);
    await callTool(alice, read);
    await callTool(alice, { ...read, idempotencyKey: '' }).catch(() => {});

    if (!server.metricsUrl) throw new Error('the server logged no metrics URL');
    scraped = await scrape(server.metricsUrl);
  }, 4 * WAIT_MS);

  afterAll(async () => {
    await alice?.close();
    await server?.stop();
    await provider?.stop();
  });

  it('counts exactly the decisions made, by decision and tool', () => {
    expect(Object.fromEntries(decisionCounts(scraped.samples))).toStrictEqual({
      'executed charge_guarded': 3,
      'replayed charge_guarded': 1,
      'conflict charge_guarded': 1,
      'inProgress charge_guarded': 1,
      'unrecorded charge_guarded': 1,
      'executed get_balance': 1,
      'replayed get_balance': 1,
      'invalid get_balance': 1,
    });
  });

  it('counts what the decision log says, line for line', async () => {
    const logged = new Map<string, number>();
    for (const { decision, tool } of await server.decisions()) {
      const key = `${decision} ${tool}`;
      logged.set(key, (logged.get(key) ?? 0) + 1);
    }
    expect(decisionCounts(scraped.samples)).toStrictEqual(logged);
  });

  it('counts the unrecorded call on a counter of its own, and no call failed closed', () => {
    expect(
      total(scraped.samples, 'idempotency_unrecorded_total', { gen_ai_tool_name: 'charge_guarded' }),
    ).toBe(1);
    expect(total(scraped.samples, 'idempotency_store_unavailable_total')).toBe(0);
  });

  it('times each store operation: a claim per keyed call with a valid key, a completion per record, a release for the unrecorded call', () => {
    const timed = (operation: string) =>
      total(scraped.samples, 'idempotency_store_operation_duration_count', {
        idempotency_store_name: 'memory',
        idempotency_store_operation: operation,
      });
    // Nine claims (ten decisions, less the invalid key's), four records, one release.
    expect([timed('claim'), timed('complete'), timed('release')]).toStrictEqual([9, 4, 1]);
  });

  it('times every decision it counts', () => {
    const counted = total(scraped.samples, 'idempotency_decisions_total');
    expect(total(scraped.samples, 'idempotency_decision_duration_count')).toBe(counted);
    expect(counted).toBe(10);
  });

  it('never holds a key, a principal or a token, in any byte of the scrape', () => {
    expect(keys).toHaveLength(4);
    expect(leaksIn(scraped.text, keys)).toStrictEqual([]);
  });
});

describe('a server whose environment names an OTLP endpoint', () => {
  it('sends it the spans and the figures, the last flushed as it stops, and never a key or principal', async () => {
    // A collector of the demo's own, on loopback: it keeps what it is sent.
    const received: Array<{ path: string; body: string }> = [];
    const collector = createServer((request, response) => {
      let body = '';
      request.on('data', (chunk: Buffer) => {
        body += chunk.toString('utf8');
      });
      request.on('end', () => {
        received.push({ path: request.url ?? '', body });
        response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
    const address = collector.address();
    if (address === null || typeof address === 'string') throw new Error('no TCP port from the OS');
    const { port } = address;
    try {
      const server = await startHttpInstance([], {
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
        DEMO_BEARER_TOKENS: TOKENS,
      });
      const alice = await connectHttpClient(server.url, { token: 'token-alice' });
      const call = { name: 'charge_guarded', arguments: { amount: 1 }, idempotencyKey: randomUUID() };
      await callTool(alice, call);
      await callTool(alice, call);
      await alice.close();
      await server.stop();
      const sent = (path: string) =>
        received
          .filter((r) => r.path === path)
          .map((r) => r.body)
          .join('\n');
      const digest = scopedKeyDigest({ scope: 'principal:alice', idempotencyKey: call.idempotencyKey });
      expect(sent('/v1/traces')).toContain(digest);
      expect(sent('/v1/traces')).toContain('"stringValue":"replayed"');
      expect(sent('/v1/metrics')).toContain(IdempotencyMetrics.decisions);
      expect(leaksIn(received.map((r) => r.body).join('\n'), [call.idempotencyKey])).toStrictEqual([]);
    } finally {
      collector.close();
    }
  });
});

describe("the request's span, exported in memory by the SDK", () => {
  const spans = new InMemorySpanExporter();
  const tracerProvider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  const metrics = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  // Exported when the test asks (forceFlush), not on a timer.
  const reader = new PeriodicExportingMetricReader({ exporter: metrics, exportIntervalMillis: 3_600_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  let http: RunningHttpServer;
  const clients: Client[] = [];
  const keys: string[] = [];

  const connect = async (token: string, era: Era = MODERN_PROTOCOL_VERSION) => {
    const client = await connectHttpClient(http.url, { token, era });
    clients.push(client);
    return client;
  };
  /** The finished spans of the tool calls made under `key` in `scope`, once `count` have ended. */
  const spansOf = async (scope: string, idempotencyKey: string, count: number) => {
    const digest = scopedKeyDigest({ scope, idempotencyKey });
    const found = () =>
      spans.getFinishedSpans().filter((s) => s.attributes[IdempotencyAttributes.keyDigest] === digest);
    // A span ends when its response is finished, which the client may see a moment before.
    await until(() => found().length === count, `${count} spans of one key`);
    return found();
  };
  const decisionOf = (span: ReadableSpan) => span.attributes[IdempotencyAttributes.decision];

  beforeAll(async () => {
    tracerProvider.register();
    const options = observeIdempotency(
      { ledger: new MemoryLedger(), store: new MemoryIdempotencyStore() },
      { meterProvider },
    );
    http = await startHttpServer({
      host: '127.0.0.1',
      port: 0,
      bearerTokens: parseBearerTokens(TOKENS, Object.values(DEMO_SCOPES), CALLER_SCOPES),
      createServer: () => createDemoServer(options),
      requestSpans: mcpRequestSpans,
    });
  });

  afterAll(async () => {
    for (const client of clients) await client.close();
    await http?.close();
    await tracerProvider.shutdown();
    await meterProvider.shutdown();
    trace.disable();
  });

  it('carries the decision: executed, then replayed, then conflict, one digest for all three', async () => {
    const alice = await connect('token-alice');
    const charge = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
    keys.push(charge.idempotencyKey);
    await callTool(alice, charge);
    await callTool(alice, charge);
    await callTool(alice, { ...charge, arguments: { amount: 999 } }).catch(() => {});
    const [executed, replayed, conflict] = await spansOf('principal:alice', charge.idempotencyKey, 3);
    expect([executed, replayed, conflict].map((s) => s && decisionOf(s))).toStrictEqual([
      'executed',
      'replayed',
      'conflict',
    ]);
    expect(executed?.attributes[IdempotencyAttributes.replayed]).toBe(false);
    expect(replayed?.attributes[IdempotencyAttributes.replayed]).toBe(true);
    // The guard's refusal, as the MCP conventions ask a span to carry an error.
    expect(conflict?.attributes['error.type']).toBe('-32602');
    expect(conflict?.status).toStrictEqual({
      code: SpanStatusCode.ERROR,
      message: IdempotencyErrorType.conflict,
    });
  });

  it('is the MCP conventions’ server span: its name, method, tool, request id and protocol era', async () => {
    for (const era of ERAS) {
      const bob = await connect('token-bob', era);
      const call = { name: 'charge_guarded', arguments: { amount: 5 }, idempotencyKey: randomUUID() };
      keys.push(call.idempotencyKey);
      await callTool(bob, call);
      const [span] = await spansOf('principal:bob', call.idempotencyKey, 1);
      expect(span?.name).toBe('tools/call charge_guarded');
      expect(span?.kind).toBe(SpanKind.SERVER);
      expect(span?.attributes).toMatchObject({
        'mcp.method.name': 'tools/call',
        'gen_ai.tool.name': 'charge_guarded',
        'gen_ai.operation.name': 'execute_tool',
        'mcp.protocol.version': era,
        [IdempotencyAttributes.decision]: 'executed',
      });
      expect(span?.attributes['jsonrpc.request.id']).toMatch(/^\d+$/);
    }
  });

  it('gives the same key of another principal another digest: a digest follows one operation', async () => {
    const key = randomUUID();
    keys.push(key);
    for (const token of ['token-alice', 'token-bob'])
      await callTool(await connect(token), { name: 'get_balance', arguments: {}, idempotencyKey: key });
    const [ofAlice] = await spansOf('principal:alice', key, 1);
    const [ofBob] = await spansOf('principal:bob', key, 1);
    expect([ofAlice, ofBob].map((s) => s && decisionOf(s))).toStrictEqual(['executed', 'executed']);
    expect(ofAlice?.attributes[IdempotencyAttributes.keyDigest]).not.toBe(
      ofBob?.attributes[IdempotencyAttributes.keyDigest],
    );
  });

  it("joins the caller's trace from params._meta (SEP-414), so a retry on any instance is in it", async () => {
    const traceId = randomUUID().replaceAll('-', '');
    const parentId = traceId.slice(0, 16);
    const params = {
      name: 'charge_guarded',
      arguments: { amount: 7 },
      idempotencyKey: randomUUID(),
      _meta: { traceparent: `00-${traceId}-${parentId}-01` },
    };
    keys.push(params.idempotencyKey);
    const headers = { authorization: 'Bearer token-alice' };
    for (const id of [1, 2])
      await (await postModern(http.url, { id, method: 'tools/call', params }, undefined, headers)).text();
    const retries = await spansOf('principal:alice', params.idempotencyKey, 2);
    expect(
      retries.map((s) => [s.spanContext().traceId, s.parentSpanContext?.spanId, decisionOf(s)]),
    ).toStrictEqual([
      [traceId, parentId, 'executed'],
      [traceId, parentId, 'replayed'],
    ]);
  });

  it('names a span only as the metrics do: a tool the server has or _OTHER, a method MCP defines, bounded values', async () => {
    // Sent as raw JSON-RPC, names the SDK will refuse: the span is made before it looks at them.
    const traceId = randomUUID().replaceAll('-', '');
    const hostile = [
      ...Array.from({ length: 20 }, () => ({ method: 'tools/call', name: `made-up-${randomUUID()}` })),
      { method: 'tools/call', name: 'x'.repeat(100_000) },
      { method: `made/up/${randomUUID()}`, name: 'charge_guarded' },
      { method: 'm'.repeat(100_000), name: 'charge_guarded' },
    ];
    for (const [index, { method, name }] of hostile.entries()) {
      const response = await fetch(http.url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          authorization: 'Bearer token-alice',
          'mcp-protocol-version': 'v'.repeat(10_000),
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: index === 0 ? 'i'.repeat(100_000) : index,
          method,
          params: { name, arguments: {}, _meta: { traceparent: `00-${traceId}-${traceId.slice(0, 16)}-01` } },
        }),
      });
      await response.text();
    }
    const inTrace = () => spans.getFinishedSpans().filter((s) => s.spanContext().traceId === traceId);
    await until(() => inTrace().length === hostile.length, 'a span for every hostile request');
    const names = inTrace().map((s) => s.name);
    expect(new Set(names)).toStrictEqual(new Set(['tools/call _OTHER', '_OTHER']));
    expect(names.filter((name) => name === '_OTHER')).toHaveLength(2);
    expect(inTrace().map((s) => s.attributes['gen_ai.tool.name'])).toStrictEqual([
      ...Array.from({ length: 21 }, () => '_OTHER'),
      undefined,
      undefined,
    ]);
    // Neither the 100,000-character id nor the made-up protocol version is carried.
    const longest = Math.max(
      ...inTrace().flatMap((s) => Object.values(s.attributes).map((v) => String(v).length)),
    );
    expect(longest).toBeLessThanOrEqual(64);
    expect(inTrace().filter((s) => s.attributes['mcp.protocol.version'] !== undefined)).toStrictEqual([]);
  });

  it('never holds a key, a principal or a token, in any exported span or metric', async () => {
    await reader.forceFlush();
    const exported = JSON.stringify({
      spans: spans.getFinishedSpans().map((s) => ({
        name: s.name,
        attributes: s.attributes,
        status: s.status,
        events: s.events,
        links: s.links,
        resource: s.resource.attributes,
      })),
      metrics: metrics.getMetrics(),
    });
    expect(keys.length).toBeGreaterThan(4);
    expect(exported).toContain(IdempotencyMetrics.decisions);
    expect(leaksIn(exported, keys)).toStrictEqual([]);
  });
});

describe('observeIdempotency, on its own', () => {
  /** Every data point of `name`, as its attributes and value. */
  async function pointsOf(
    reader: PeriodicExportingMetricReader,
    exporter: InMemoryMetricExporter,
    name: string,
  ) {
    await reader.forceFlush();
    const metric = exporter
      .getMetrics()
      .at(-1)
      ?.scopeMetrics.flatMap((scope) => scope.metrics)
      .find((m) => m.descriptor.name === name);
    return (metric?.dataPoints ?? []).map((point) => ({ attributes: point.attributes, value: point.value }));
  }
  function sdk() {
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
    return { exporter, reader, meterProvider: new MeterProvider({ readers: [reader] }) };
  }
  const result = { content: [{ type: 'text', text: 'ok' }] };

  it('counts a call the store failed closed, and times the failed claim with its error', async () => {
    class DownStore extends MemoryIdempotencyStore {
      override async claim(): Promise<Claim> {
        throw new StoreUnavailableError(new Error('connect ECONNREFUSED'));
      }
    }
    const { exporter, reader, meterProvider } = sdk();
    const guard = createToolCallGuard(
      observeIdempotency({ store: new DownStore() }, { meterProvider, storeName: 'redis' }),
    );
    let ran = 0;
    const answer = await guard({ name: 'charge', arguments: {}, idempotencyKey: 'k' }, {}, async () => {
      ran += 1;
      return result;
    }).catch((error: unknown) => idempotencyErrorOf(error)?.type);
    expect([answer, ran]).toStrictEqual([IdempotencyErrorType.storeUnavailable, 0]);
    expect(await pointsOf(reader, exporter, IdempotencyMetrics.storeUnavailable)).toStrictEqual([
      { attributes: { 'gen_ai.tool.name': 'charge' }, value: 1 },
    ]);
    const [claim] = await pointsOf(reader, exporter, IdempotencyMetrics.storeOperationDuration);
    expect(claim?.attributes).toStrictEqual({
      [IdempotencyAttributes.storeName]: 'redis',
      [IdempotencyAttributes.storeOperation]: 'claim',
      'error.type': 'StoreUnavailableError',
    });
  });

  it('counts a tool the server does not list as _OTHER, so made-up names cannot grow the series', async () => {
    const { exporter, reader, meterProvider } = sdk();
    const options = observeIdempotency(
      { store: new MemoryIdempotencyStore() },
      { meterProvider, tools: ['charge'] },
    );
    const guard = createToolCallGuard(options);
    for (const name of ['charge', 'made-up-1', 'made-up-2'])
      await guard({ name, arguments: {}, idempotencyKey: randomUUID() }, {}, async () => result);
    const points = await pointsOf(reader, exporter, IdempotencyMetrics.decisions);
    expect(points.map((p) => [p.attributes['gen_ai.tool.name'], p.value])).toStrictEqual([
      ['charge', 1],
      ['_OTHER', 2],
    ]);
  });

  it('with no SDK registered, leaves the store as it was and still tells the log', async () => {
    const store = new MemoryIdempotencyStore();
    const logged: string[] = [];
    const options = observeIdempotency({ store, onDecision: (event) => logged.push(event.decision) });
    expect(options.store).toBe(store);
    await createToolCallGuard(options)(
      { name: 'charge', arguments: {}, idempotencyKey: 'k' },
      {},
      async () => result,
    );
    expect(logged).toStrictEqual(['executed']);
  });

  it('passes a ticket through to the store it wraps, so a claim settles as it would unobserved', async () => {
    const store = new MemoryIdempotencyStore();
    const { meterProvider } = sdk();
    const observed = observeIdempotency({ store }, { meterProvider }).store;
    const claim = await observed.claim({ scope: 's', idempotencyKey: 'k' }, 'f', 60_000);
    const ticket: ClaimTicket | undefined = claim.state === 'claimed' ? claim.ticket : undefined;
    expect(ticket && (await observed.complete(ticket, { result }, 60_000))).toBe(true);
    expect((await store.claim({ scope: 's', idempotencyKey: 'k' }, 'f', 60_000)).state).toBe('completed');
  });
});
