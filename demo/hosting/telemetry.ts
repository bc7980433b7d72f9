// --- OpenTelemetry for the demo server: the standard environment, and Prometheus on a port ---
//
// Off unless asked for. An OTLP endpoint in the environment (`OTEL_EXPORTER_OTLP_ENDPOINT`, or the
// `…_TRACES_ENDPOINT` / `…_METRICS_ENDPOINT` of one signal; the exporters read their own headers,
// timeouts and protocol settings from it too) sends traces and metrics there, and
// `--metrics-port N` serves the metrics as Prometheus text at `/metrics` on `--host`. The guard's
// figures come from mcp-request-idempotency/otel (`observe`); the span they are marked on is this
// file's, one per MCP request over HTTP (`requestSpans`). Over stdio there is no span of the
// server's own, and so none to mark: the figures still count every decision.

import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ClientNotification, ClientRequest } from '@modelcontextprotocol/server';
import { context, propagation, type Span, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import type { MetricReader } from '@opentelemetry/sdk-metrics';
import type { Request, RequestHandler } from 'express';
import type { observeIdempotency } from 'mcp-request-idempotency/otel';
import type { ServerConfig } from './cli.js';
import { log } from './log.js';

export interface Telemetry {
  /** The guard's options, observed (unchanged when telemetry is off). */
  observe<T extends Parameters<typeof observeIdempotency>[0]>(options: T): T;
  /** Wraps each MCP request over HTTP in a span of its own, when traces go somewhere. */
  requestSpans?: RequestSpans;
  /** Where Prometheus scrapes, with `--metrics-port`. */
  metricsUrl?: URL;
  /** Sends what is pending and stops: after the last decision is recorded. */
  close(): Promise<void>;
}

/** The server as its telemetry names it, unless `OTEL_SERVICE_NAME` says otherwise. */
export interface ServiceInfo {
  name: string;
  version: string;
}

/** How often metrics go to an OTLP endpoint (`OTEL_METRIC_EXPORT_INTERVAL`): the specification's default. */
const DEFAULT_METRIC_EXPORT_INTERVAL_MS = 60_000;

/**
 * Starts what `config` and `env` ask for. It must run before the guard's options are observed: the
 * metrics API binds no meter late, so a guard observed before the provider exists counts nothing.
 */
export async function startTelemetry(
  config: ServerConfig,
  env: NodeJS.ProcessEnv,
  service: ServiceInfo,
): Promise<Telemetry> {
  const wanted = (signal: 'TRACES' | 'METRICS') =>
    env.OTEL_SDK_DISABLED !== 'true' &&
    env[`OTEL_${signal}_EXPORTER`] !== 'none' &&
    Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env[`OTEL_EXPORTER_OTLP_${signal}_ENDPOINT`]);
  const traces = wanted('TRACES');
  if (config.metricsPort === undefined && !wanted('METRICS') && !traces)
    return { observe: (options) => options, close: async () => {} };

  // The SDK, its exporters and the guard's instruments load only now: a server that asked for no
  // telemetry never reads them (the API alone, above, is the no-op every library may import).
  const [
    { OTLPMetricExporter },
    { PrometheusExporter },
    { OTLPTraceExporter },
    resources,
    metrics,
    tracing,
    otel,
  ] = await Promise.all([
    import('@opentelemetry/exporter-metrics-otlp-http'),
    import('@opentelemetry/exporter-prometheus'),
    import('@opentelemetry/exporter-trace-otlp-http'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/sdk-metrics'),
    import('@opentelemetry/sdk-trace-node'),
    import('mcp-request-idempotency/otel'),
  ]);
  const { detectResources, envDetector, resourceFromAttributes } = resources;
  const { MeterProvider, PeriodicExportingMetricReader } = metrics;
  const { BatchSpanProcessor, NodeTracerProvider } = tracing;
  const prometheus =
    config.metricsPort === undefined ? undefined : new PrometheusExporter({ preventServerStart: true });
  const readers: MetricReader[] = [];
  if (prometheus) readers.push(prometheus);
  if (wanted('METRICS')) {
    const interval = Number(env.OTEL_METRIC_EXPORT_INTERVAL) || DEFAULT_METRIC_EXPORT_INTERVAL_MS;
    readers.push(
      new PeriodicExportingMetricReader({
        exporter: new OTLPMetricExporter(),
        exportIntervalMillis: interval,
      }),
    );
  }

  // The service's name and version, which OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override.
  // No process or host detectors: their attributes (the command line, the user) are the server's own.
  const resource = resourceFromAttributes({
    'service.name': service.name,
    'service.version': service.version,
  }).merge(detectResources({ detectors: [envDetector] }));
  const meterProvider = readers.length > 0 ? new MeterProvider({ resource, readers }) : undefined;
  const tracerProvider = traces
    ? new NodeTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())] })
    : undefined;
  // The global tracer, an AsyncLocalStorage context (the active span follows each request through
  // the SDK to the guard), and W3C Trace Context, which SEP-414 carries in `params._meta`.
  tracerProvider?.register();
  const metricsServer =
    prometheus && config.metricsPort !== undefined
      ? await serveMetrics(prometheus, config.host, config.metricsPort)
      : undefined;
  const metricsUrl = metricsServer && urlOf(config.host, metricsServer.address());
  if (metricsUrl) log({ event: 'metrics', url: metricsUrl.href });
  return {
    // Without a meter provider the guard's decisions still mark the spans.
    observe: (options) => otel.observeIdempotency(options, { meterProvider, storeName: config.store }),
    requestSpans: tracerProvider && mcpRequestSpans,
    metricsUrl,
    close: async () => {
      await new Promise<void>((resolve) =>
        metricsServer ? metricsServer.close(() => resolve()) : resolve(),
      );
      // Sends what is pending to an OTLP endpoint.
      await Promise.allSettled([meterProvider?.shutdown(), tracerProvider?.shutdown()]);
    },
  };
}

/** Prometheus text at `/metrics`, from a server of its own, so a scrape never queues behind MCP calls. */
async function serveMetrics(exporter: PrometheusExporter, host: string, port: number): Promise<Server> {
  const server = createServer((request, response) => {
    if (request.method === 'GET' && request.url?.split('?')[0] === '/metrics')
      exporter.getMetricsRequestHandler(request, response);
    else response.writeHead(404).end();
  });
  // A scrape's connection must not keep a stopping server alive.
  server.unref();
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error) =>
      reject(
        new Error(`cannot serve metrics on ${host}:${port} (${error.message}): give another --metrics-port`),
      ),
    );
    server.listen(port, host, resolve);
  });
  return server;
}

function urlOf(host: string, address: string | AddressInfo | null): URL {
  if (address === null || typeof address === 'string') throw new Error(`metrics not on TCP: ${address}`);
  return new URL(`http://${host.includes(':') ? `[${host}]` : host}:${address.port}/metrics`);
}

// --- The server's own span per MCP request over HTTP ---
//
// The SDK makes no span, so the server makes the one the MCP conventions describe: `{method}
// {tool}`, kind SERVER, its parent the caller's trace from `params._meta` (SEP-414's `traceparent`),
// active while the SDK and the guard handle the request, so the guard marks it with its decision.
// Stateless HTTP carries one request per POST. Nothing is read from the request but the method,
// the tool's name, the request id and the protocol version: never a header, an argument or a key.
//
// All four come from the caller before the SDK has checked any of them, so a span carries each
// only as the metrics do: a method MCP defines, a tool the server has, else `_OTHER`; an id and a
// version of bounded length, else none. Made-up names cannot grow the span names without bound,
// nor can a name of megabytes be held in a batch waiting for a collector that is down.

const tracer = () => trace.getTracer('sep-3182-idempotency-demo');

/** Builds the span middleware, given the tools the server has (the names a span may carry). */
export type RequestSpans = (tools: readonly string[]) => RequestHandler;

/** The conventions' own value for a name they cannot keep. */
const OTHER = '_OTHER';

/**
 * Every method a client sends a server, checked against the SDK's types: the compiler says when
 * one is added or dropped.
 */
const MCP_METHODS: Record<ClientRequest['method'] | ClientNotification['method'], true> = {
  initialize: true,
  ping: true,
  'server/discover': true,
  'subscriptions/listen': true,
  'tools/list': true,
  'tools/call': true,
  'resources/list': true,
  'resources/templates/list': true,
  'resources/read': true,
  'resources/subscribe': true,
  'resources/unsubscribe': true,
  'prompts/list': true,
  'prompts/get': true,
  'completion/complete': true,
  'logging/setLevel': true,
  'notifications/initialized': true,
  'notifications/cancelled': true,
  'notifications/progress': true,
  'notifications/roots/list_changed': true,
};

/** Longest request id a span carries; clients number their requests, or send a UUID. */
const MAX_REQUEST_ID_LENGTH = 64;

/** A protocol version is a date (`2025-11-25`); anything else is not one. */
const PROTOCOL_VERSION = /^\d{4}-\d{2}-\d{2}$/;

/** Express middleware, after the body is read and before the SDK's handler. */
export const mcpRequestSpans: RequestSpans = (tools) => {
  const known = new Set(tools);
  return (req, res, next) => {
    const request = jsonRpcRequestOf(req.body);
    if (!request) return next();
    const { params } = request;
    const method = methodOf(request.method);
    const tool = method === 'tools/call' ? toolOf(params.name, known) : undefined;
    const id = requestIdOf(request.id);
    const meta = isObject(params._meta) ? params._meta : {};
    const version = protocolVersionOf(req, params, meta);
    const parent = propagation.extract(context.active(), meta);
    const span: Span = tracer().startSpan(
      tool === undefined ? method : `${method} ${tool}`,
      {
        kind: SpanKind.SERVER,
        attributes: {
          'mcp.method.name': method,
          'network.transport': 'tcp',
          'network.protocol.name': 'http',
          ...(tool !== undefined && { 'gen_ai.tool.name': tool, 'gen_ai.operation.name': 'execute_tool' }),
          ...(id !== undefined && { 'jsonrpc.request.id': id }),
          ...(version !== undefined && { 'mcp.protocol.version': version }),
        },
      },
      parent,
    );
    res.once('close', () => {
      if (res.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    });
    context.with(trace.setSpan(parent, span), next);
  };
};

function methodOf(method: string): string {
  return Object.hasOwn(MCP_METHODS, method) ? method : OTHER;
}

/** The tool's name if the server has such a tool; a call without a name names none. */
function toolOf(name: unknown, known: ReadonlySet<string>): string | undefined {
  if (typeof name !== 'string') return undefined;
  return known.has(name) ? name : OTHER;
}

function requestIdOf(id: unknown): string | undefined {
  const text = typeof id === 'string' || typeof id === 'number' ? String(id) : undefined;
  return text !== undefined && text.length <= MAX_REQUEST_ID_LENGTH ? text : undefined;
}

interface JsonRpcRequest {
  method: string;
  params: Record<string, unknown>;
  id: unknown;
}

/** The request in the body express read (a Buffer), or undefined for anything else (a batch, a notification's garbage). */
function jsonRpcRequestOf(body: unknown): JsonRpcRequest | undefined {
  if (!Buffer.isBuffer(body)) return undefined;
  let message: unknown;
  try {
    message = JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
  if (!isObject(message) || typeof message.method !== 'string') return undefined;
  return { method: message.method, params: isObject(message.params) ? message.params : {}, id: message.id };
}

/** 2026-07-28 and 2025 clients after initialize send the header; initialize says it in its params. */
function protocolVersionOf(
  req: Request,
  params: Record<string, unknown>,
  meta: Record<string, unknown>,
): string | undefined {
  const candidates = [
    req.headers['mcp-protocol-version'],
    meta['io.modelcontextprotocol/protocolVersion'],
    params.protocolVersion,
  ];
  return candidates.find(
    (value): value is string => typeof value === 'string' && PROTOCOL_VERSION.test(value),
  );
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
