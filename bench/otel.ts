// --- What do the guard's OpenTelemetry figures cost? ---
//
// In a process of its own, like guard-alone.ts, whose pieces it times the same way:
//   node --expose-gc --import tsx bench/otel.ts <rounds> <ms per piece per round>
// The guard alone's first execution three ways, interleaved round after round and sharing one
// store (so its growth weighs on all three alike): as it is; observed by
// `mcp-request-idempotency/otel` with `@opentelemetry/api` and no SDK, where every call it makes is
// the API's no-op; and observed with the SDK's MeterProvider and the Prometheus exporter as its
// reader, what `--metrics-port` runs (no scrape while timing: a scrape reads what the calls have
// summed, once per scrape interval). Then one decision told to each, alone, and the key digest that
// each decision costs a span that records.

import { randomUUID } from 'node:crypto';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import {
  createToolCallGuard,
  type DecisionEvent,
  type JsonObject,
  MemoryIdempotencyStore,
} from 'mcp-request-idempotency';
import { IdempotencyMetrics, observeIdempotency, scopedKeyDigest } from 'mcp-request-idempotency/otel';
import { AMOUNT, chargeResult, TOOL, WrongAnswerError } from './calls.js';
import { type Piece, piece, timePieces } from './guard-alone.js';
import { answerIfMain, type Report, summarize, summaryCells, table, yesNo } from './harness.js';

/** What observing may add to a first execution with no SDK installed: nothing a call would notice. */
const NO_SDK_TARGET_US = 0.3;

const RESULT: JsonObject = chargeResult(AMOUNT);

async function main([rounds = 20, msPerPiece = 5]: number[]): Promise<Report> {
  const store = new MemoryIdempotencyStore({ maxRecords: 10_000_000, maxRecordsPerScope: 10_000_000 });
  const exporter = new PrometheusExporter({ preventServerStart: true });
  const meterProvider = new MeterProvider({ readers: [exporter] });
  const observed = {
    noSdk: observeIdempotency({ store }),
    sdk: observeIdempotency({ store }, { meterProvider }),
  };
  const guards = {
    plain: createToolCallGuard({ store }),
    noSdk: createToolCallGuard(observed.noSdk),
    sdk: createToolCallGuard(observed.sdk),
  };
  const firstExecution = (guard: (typeof guards)['plain']) => async (params: unknown) => {
    if ((await guard(Object(params), {}, async () => RESULT)) !== RESULT)
      throw new WrongAnswerError('otel: not the tool result');
  };
  const fresh = () => ({ name: TOOL, arguments: { amount: AMOUNT }, idempotencyKey: randomUUID() });
  const input = 'guard alone: first execution, no-op tool';
  const plain = piece('as it is', input, firstExecution(guards.plain), fresh);
  const noSdk = piece('/otel, @opentelemetry/api and no SDK', input, firstExecution(guards.noSdk), fresh);
  const sdk = piece('/otel, the SDK and the Prometheus exporter', input, firstExecution(guards.sdk), fresh);
  // What observing adds to each call, alone: a first execution's figures above move by a microsecond
  // or two from run to run on a busy machine, these by nanoseconds. With no SDK the store is the
  // guard's own, so one decision told is all of it.
  const event: DecisionEvent = {
    decision: 'executed',
    scope: 'local',
    idempotencyKey: randomUUID(),
    tool: TOOL,
    durationMs: 0.1,
  };
  const decided = 'one decision: counted and put on the active span (none here)';
  const decisionNoSdk = piece('/otel, @opentelemetry/api and no SDK', decided, () =>
    observed.noSdk.onDecision(event),
  );
  const decisionSdk = piece('/otel, the SDK and the Prometheus exporter', decided, () =>
    observed.sdk.onDecision(event),
  );
  const id = { scope: 'principal:alice', idempotencyKey: randomUUID() };
  const digest = piece('key digest', 'per decision on a recording span', () => scopedKeyDigest(id));
  const all: Piece[] = [
    plain,
    { ...noSdk, targetUs: NO_SDK_TARGET_US, over: plain },
    { ...sdk, over: plain },
    { ...decisionNoSdk, targetUs: NO_SDK_TARGET_US },
    decisionSdk,
    digest,
  ];
  await timePieces(all, rounds, msPerPiece);
  await checkTheSdkCounted(exporter);

  const baseline = summarize(plain.samples).medianUs;
  const signed = (us: number) => `${us >= 0 ? '+' : ''}${us.toFixed(2)} µs`;
  const rows = all.map((p) => {
    const summary = summarize(p.samples);
    // What the piece adds to a call: over the guard as it is, or the piece itself.
    const addedUs = p.over ? summary.medianUs - baseline : summary.medianUs;
    const ratio = p.over ? summary.medianUs / baseline : undefined;
    const met = p.targetUs === undefined ? undefined : addedUs <= p.targetUs;
    return { variant: p.piece, input: p.input, ...summary, addedUs, ratio, met };
  });
  return {
    title: "The guard's OpenTelemetry figures (mcp-request-idempotency/otel)",
    how:
      `${rounds} interleaved rounds of ~${msPerPiece} ms per piece, timed by mitata; the three first executions share one memory store.\n` +
      `Ratio: a first execution's median over the guard's as it is, measured side by side; target: what /otel adds with no SDK, ≤ ${NO_SDK_TARGET_US} µs.`,
    table: table(
      'variant | input | median µs | p99 µs | samples | over as it is | ratio | target',
      rows.map((r) => [
        r.variant,
        r.input,
        ...summaryCells(r),
        r.ratio === undefined ? '' : signed(r.addedUs),
        r.ratio === undefined ? '' : `${r.ratio.toFixed(3)} ×`,
        r.met === undefined ? '' : `≤ ${NO_SDK_TARGET_US} µs ${yesNo(r.met)}`,
      ]),
    ),
    checks: rows.flatMap((r) =>
      r.met === undefined
        ? []
        : [
            {
              target: `${r.variant}, ${r.input}: adds ≤ ${NO_SDK_TARGET_US} µs`,
              figure:
                r.ratio === undefined ? signed(r.addedUs) : `${signed(r.addedUs)} (${r.ratio.toFixed(3)} ×)`,
              met: r.met,
            },
          ],
    ),
    figures: rows,
  };
}

/** A figure is void if the SDK variant's decisions never reached the exporter. */
async function checkTheSdkCounted(exporter: PrometheusExporter): Promise<void> {
  const { resourceMetrics } = await exporter.collect();
  const decisions = resourceMetrics.scopeMetrics
    .flatMap((scope) => scope.metrics)
    .find((metric) => metric.descriptor.name === IdempotencyMetrics.decisions);
  const counted = decisions?.dataPoints.reduce((sum, point) => sum + Number(point.value), 0) ?? 0;
  if (counted === 0) throw new WrongAnswerError('otel: the SDK counted no decision');
}

await answerIfMain(import.meta.url, main);
