// --- What do the guard's OpenTelemetry figures cost? ---
//
// In a process of its own, like guard-alone.ts:
//   node --expose-gc --import tsx test/bench/otel.ts <rounds> <ms per piece per round>
// The guard alone's first execution three ways, call by call in interleaved rounds (harness.ts)
// and sharing one store, so its growth weighs on all three alike: as it is; observed by
// `mcp-request-idempotency/otel` with `@opentelemetry/api` and no SDK; and observed with the SDK's
// MeterProvider and the Prometheus exporter as its reader, what `--metrics-port` runs (no scrape
// while timing: a scrape reads what the calls summed, once per scrape interval). Then, timed by
// mitata as guard-alone.ts times its pieces, one decision told to each observer alone (with no SDK
// the store is left as it was, so that is all /otel adds), and the key digest a recording span gets.

import { randomUUID } from 'node:crypto';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import {
  createToolCallGuard,
  type DecisionEvent,
  type IdempotencyGuardOptions,
  type JsonObject,
  MemoryIdempotencyStore,
} from 'mcp-request-idempotency';
import { IdempotencyMetrics, observeIdempotency, scopedKeyDigest } from 'mcp-request-idempotency/otel';
import { AMOUNT, chargeResult, TOOL, WrongAnswerError } from './calls.js';
import { piece, timePieces } from './guard-alone.js';
import {
  answerIfMain,
  interleave,
  type Report,
  type Summary,
  summarize,
  summaryCells,
  table,
  type Variant,
  yesNo,
} from './harness.js';

/** What observing may add to a call with no SDK installed: nothing a call would notice. */
const NO_SDK_TARGET_US = 0.3;

/** About how long a first execution of the guard alone takes, to size a round's batch. */
const FIRST_EXECUTION_US = 10;

const RESULT: JsonObject = chargeResult(AMOUNT);
const NO_SDK = '/otel, @opentelemetry/api and no SDK';
const SDK = '/otel, the SDK and the Prometheus exporter';

async function main([rounds = 20, msPerPiece = 5]: number[]): Promise<Report> {
  const store = new MemoryIdempotencyStore({ maxRecords: 10_000_000, maxRecordsPerScope: 10_000_000 });
  const exporter = new PrometheusExporter({ preventServerStart: true });
  const meterProvider = new MeterProvider({ readers: [exporter] });
  const noSdk = observeIdempotency({ store });
  const sdk = observeIdempotency({ store }, { meterProvider });

  const firsts = await interleave(
    [
      {
        meta: {},
        batchCalls: Math.round((msPerPiece * 1000) / FIRST_EXECUTION_US),
        variants: [
          firstExecution('as it is', { store }),
          firstExecution(NO_SDK, noSdk),
          firstExecution(SDK, sdk),
        ],
      },
    ],
    { rounds, warmupRounds: 1 },
  );
  await checkTheSdkCounted(exporter);

  const event: DecisionEvent = {
    decision: 'executed',
    scope: 'local',
    idempotencyKey: randomUUID(),
    tool: TOOL,
    durationMs: 0.1,
  };
  const decided = 'one decision, alone (no active span)';
  const id = { scope: 'principal:alice', idempotencyKey: randomUUID() };
  const pieces = [
    { ...piece(NO_SDK, decided, () => noSdk.onDecision(event)), targetUs: NO_SDK_TARGET_US },
    piece(SDK, decided, () => sdk.onDecision(event)),
    piece('key digest', 'per decision on a recording span', () => scopedKeyDigest(id)),
  ];
  await timePieces(pieces, rounds, msPerPiece);

  const input = 'guard alone: first execution, no-op tool';
  const [baseline] = firsts;
  const rows: Array<
    Summary & { variant: string; input: string; addedUs: number; ratio?: number; met?: boolean }
  > = [
    ...firsts.map((row) => {
      const addedUs = row.medianUs - (baseline?.medianUs ?? Number.NaN);
      const met = row.variant === NO_SDK ? addedUs <= NO_SDK_TARGET_US : undefined;
      return { ...row, input, addedUs, met };
    }),
    ...pieces.map((p) => {
      const summary = summarize(p.samples);
      const met = p.targetUs === undefined ? undefined : summary.medianUs <= p.targetUs;
      return { variant: p.piece, input: p.input, ...summary, addedUs: summary.medianUs, met };
    }),
  ];
  const signed = (us: number) => `${us >= 0 ? '+' : ''}${us.toFixed(2)} µs`;
  return {
    title: "The guard's OpenTelemetry figures (mcp-request-idempotency/otel)",
    how:
      `First executions: ${rounds} interleaved rounds, each a batch of every variant, call by call, sharing one memory store; ratio: a median over the guard's as it is.\n` +
      `One decision and the digest: ~${msPerPiece} ms a round, timed by mitata. Target: what /otel adds with no SDK, ≤ ${NO_SDK_TARGET_US} µs a call.`,
    table: table(
      'variant | input | median µs | p99 µs | samples | over as it is | ratio | target',
      rows.map((r) => [
        r.variant,
        r.input,
        ...summaryCells(r),
        r.ratio === undefined || r === rows[0] ? '' : signed(r.addedUs),
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

/** A fresh key for every call, made before the call is timed. */
function firstExecution(name: string, options: IdempotencyGuardOptions): Variant {
  const guard = createToolCallGuard(options);
  let params: Record<string, unknown> = {};
  return {
    name,
    beforeCall: async () => {
      params = { name: TOOL, arguments: { amount: AMOUNT }, idempotencyKey: randomUUID() };
    },
    call: () => guard(params, {}, async () => RESULT),
    check: (outcome) => {
      if (!outcome.ok || outcome.result !== RESULT)
        throw new WrongAnswerError(`${name}: not the tool result`);
    },
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
