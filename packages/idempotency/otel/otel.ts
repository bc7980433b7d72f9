// --- What the guard decided, where operators look: OpenTelemetry ---
//
// One call, `observeIdempotency(options)`, turns the guard's options into options that also report
// every keyed decision as OpenTelemetry metrics, time every store operation, and mark the request's
// active span with the decision. It composes from outside: the guard's own `onDecision` and store
// are wrapped, the algorithm is untouched, and a server that never imports this file installs
// nothing. It depends on `@opentelemetry/api` alone (an optional peer): with no SDK registered it
// counts and times nothing, and leaves the store as it was.
//
// Names follow the OpenTelemetry conventions for MCP where they say something (`mcp.method.name`,
// `gen_ai.tool.name`, `error.type`, `rpc.response.status_code`, durations in seconds); what is new
// has a namespace of its own, `idempotency.*` (docs/operations.md lists every name, its unit and
// what it tells an operator). Never an attribute of the key or of the caller's scope: the key is the
// caller's, the scope names its principal, and either would give a metric a series per operation or
// per caller. A span gets a digest of the scoped key instead, the same on every instance, so one
// operation's retries can be followed across a fleet.
//
// What the guard cannot know is the protocol era: the SDK lifts the 2026-07-28 envelope out of the
// params before the guard sees them, and a 2025 connection's version was negotiated once, at
// initialize. So the decision counter has no `mcp.protocol.version`; the span the server makes per
// request can, and should set it there.

import { hash } from 'node:crypto';
import {
  type Attributes,
  type Counter,
  createNoopMeter,
  type Histogram,
  type Meter,
  type MeterProvider,
  metrics,
  SpanStatusCode,
  trace,
} from '@opentelemetry/api';
import type { Decision, DecisionEvent } from '../core/decisions.js';
import { IdempotencyErrorType, idempotencyErrorCode } from '../core/errors.js';
import type { Fingerprint } from '../core/fingerprint.js';
import type { IdempotencyGuardOptions } from '../core/options.js';
import type { Claim, ClaimTicket, IdempotencyStore, RecordId, StoredResponse } from '../stores/contract.js';

/** The instruments, by the names an exporter shows (Prometheus: dots become `_`, counters get `_total`). */
export const IdempotencyMetrics = {
  /** Counter, `{decision}`: keyed calls by decision and tool. */
  decisions: 'idempotency.decisions',
  /** Histogram, `s`: from the key's arrival at the guard to its decision (an execution's includes the tool's run). */
  decisionDuration: 'idempotency.decision.duration',
  /** Histogram, `s`: each store operation, by store and operation. */
  storeOperationDuration: 'idempotency.store.operation.duration',
  /** Counter, `{call}`: keyed calls refused because the store failed (`storeUnavailable`: fail closed, nothing ran). */
  storeUnavailable: 'idempotency.store_unavailable',
  /** Counter, `{call}`: keyed calls that executed and answered, but were not recorded. */
  unrecorded: 'idempotency.unrecorded',
} as const;

/** The attributes of this file's own namespace (the conventions' are spelled where they are set). */
export const IdempotencyAttributes = {
  decision: 'idempotency.decision',
  /** Span only: whether the caller got a stored response rather than an execution. */
  replayed: 'idempotency.replayed',
  /** Span only: `scopedKeyDigest` of the record, never the key. */
  keyDigest: 'idempotency.key.digest',
  storeName: 'idempotency.store.name',
  storeOperation: 'idempotency.store.operation',
} as const;

export interface IdempotencyTelemetryOptions {
  /**
   * Where the instruments come from; by default the global one. The metrics API binds no meter
   * late: call this after your SDK registered its provider, or every instrument stays a no-op.
   */
  meterProvider?: MeterProvider;
  /** The store as the figures name it (`memory`, `redis`, `postgres`); by default from its class. */
  storeName?: string;
  /**
   * The tools the server has. The tool name comes from the client, before the SDK checks that such
   * a tool exists, so any other name is counted as `_OTHER`; unset, the first `MAX_TOOL_NAMES`
   * names seen are counted as themselves and any later one as `_OTHER`.
   */
  tools?: readonly string[];
}

/**
 * Distinct tool names counted as themselves when the server does not list its tools: more than a
 * server registers, few enough that a client sending made-up names cannot grow the series far.
 */
export const MAX_TOOL_NAMES = 100;

/** What the guard's options need to be observed; any other field passes through unchanged. */
type Observable = Pick<IdempotencyGuardOptions, 'store' | 'onDecision'>;

/**
 * The guard's options, observed: the store timed, and each decision counted and put on the active
 * span, before the options' own `onDecision` (if any) is told. Call it once and share the result
 * across the servers a factory makes, as the store is shared.
 */
export function observeIdempotency<T extends Observable>(
  options: T,
  telemetry: IdempotencyTelemetryOptions = {},
): T & Required<Observable> {
  const meter = (telemetry.meterProvider ?? metrics.getMeterProvider()).getMeter(INSTRUMENTATION_SCOPE);
  // The metrics API binds no meter late: one from its no-op provider (no SDK registered yet) stays a
  // no-op for good. Then there is nothing to count or time, and a decision costs only the look at the
  // active span (the trace API does bind late, so a tracer registered later is still seen).
  const instruments = meter instanceof NoopMeter ? undefined : new Instruments(meter);
  const observer = new DecisionObserver(instruments, new ToolNames(telemetry.tools));
  const log = options.onDecision;
  const storeName = telemetry.storeName ?? storeNameOf(options.store);
  return {
    ...options,
    store: instruments ? new TimedStore(options.store, storeName, instruments.storeDuration) : options.store,
    // Two observers share the one `onDecision`: the figures first (they never throw), then the log.
    onDecision: (event: DecisionEvent) => {
      observer.observe(event);
      log?.(event);
    },
  };
}

/**
 * The class of the API's no-op meter, which its global provider hands out while no SDK is
 * registered. The API exports no class to test against, only this factory of its instances.
 */
const NoopMeter = createNoopMeter().constructor;

/** Every instrument, made once per observed guard. */
class Instruments {
  readonly decisions: Counter;
  readonly decisionDuration: Histogram;
  readonly storeUnavailable: Counter;
  readonly unrecorded: Counter;
  readonly storeDuration: Histogram;

  constructor(meter: Meter) {
    this.decisions = meter.createCounter(IdempotencyMetrics.decisions, {
      description: 'Keyed tools/call requests, by what the idempotency guard decided',
      unit: '{decision}',
    });
    this.decisionDuration = meter.createHistogram(IdempotencyMetrics.decisionDuration, {
      description: "How long the idempotency guard took to decide (an execution's includes the tool's run)",
      unit: 's',
      advice: { explicitBucketBoundaries: DECISION_BUCKETS_S },
    });
    this.storeUnavailable = meter.createCounter(IdempotencyMetrics.storeUnavailable, {
      description: 'Keyed calls refused, nothing executed, because the idempotency store failed',
      unit: '{call}',
    });
    this.unrecorded = meter.createCounter(IdempotencyMetrics.unrecorded, {
      description: 'Keyed calls executed and answered but not recorded: a retry may execute again',
      unit: '{call}',
    });
    this.storeDuration = meter.createHistogram(IdempotencyMetrics.storeOperationDuration, {
      description: 'How long each idempotency store operation took, by store and operation',
      unit: 's',
      advice: { explicitBucketBoundaries: STORE_BUCKETS_S },
    });
  }
}

/**
 * A digest of the record's identity (the caller's scope and the key), the same on every instance:
 * what a span carries so an operator can follow one operation's retries, and find them from a key a
 * client reports, without the key or the scope ever leaving the server. SHA-256 of an unambiguous
 * encoding (JSON of an array of strings), cut to 128 bits, ample to tell operations apart.
 */
export function scopedKeyDigest({ scope, idempotencyKey }: RecordId): string {
  return hash('sha256', JSON.stringify([KEY_DIGEST_VERSION, scope, idempotencyKey]), 'hex').slice(0, 32);
}

/** Bump to change every digest at once. */
const KEY_DIGEST_VERSION = 'idempotency-key-digest/1';

/** The instrumentation scope every instrument is made in: this package. */
const INSTRUMENTATION_SCOPE = 'mcp-request-idempotency';

/**
 * Decision time, in seconds: from a replay's tenth of a millisecond up to the MCP conventions' own
 * bounds for an operation (300 s), since an execution's decision comes after the tool's run.
 */
const DECISION_BUCKETS_S = [
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120,
  300,
];

/**
 * Store operation time, in seconds: the memory store answers in microseconds, Redis and Postgres in
 * a round trip or two (a fraction of a millisecond on one host); a second or more is a store in
 * trouble, and the Postgres store's statement bound (1 s by default) ends there.
 */
const STORE_BUCKETS_S = [
  0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
  0.5, 1, 2.5, 5, 10,
];

/** The error the guard answers each of its refusals with (core/guard.ts throws them; core/errors.ts has their codes). */
const REFUSALS: Partial<Record<Decision, IdempotencyErrorType>> = {
  invalid: IdempotencyErrorType.invalid,
  conflict: IdempotencyErrorType.conflict,
  inProgress: IdempotencyErrorType.inProgress,
  scopeUnknown: IdempotencyErrorType.scopeUnknown,
  storeFull: IdempotencyErrorType.storeFull,
  quotaExceeded: IdempotencyErrorType.quotaExceeded,
  storeUnavailable: IdempotencyErrorType.storeUnavailable,
};

/** Counts each decision (when there is an SDK to count it) and marks the active span with it. */
class DecisionObserver {
  constructor(
    private readonly instruments: Instruments | undefined,
    private readonly tools: ToolNames,
  ) {}

  observe(event: DecisionEvent): void {
    try {
      if (this.instruments) this.count(event, this.instruments);
      markActiveSpan(event);
    } catch {
      // Telemetry must never change what the caller is answered.
    }
  }

  private count(event: DecisionEvent, instruments: Instruments): void {
    const tool = this.tools.attributeOf(event.tool);
    const perTool: Attributes = tool === undefined ? {} : { 'gen_ai.tool.name': tool };
    // `mcp.method.name` lines these figures up with the conventions' `mcp.server.operation.duration`.
    const attributes: Attributes = {
      [IdempotencyAttributes.decision]: event.decision,
      'mcp.method.name': 'tools/call',
      ...perTool,
    };
    instruments.decisions.add(1, attributes);
    instruments.decisionDuration.record(event.durationMs / 1000, attributes);
    if (event.decision === 'storeUnavailable') instruments.storeUnavailable.add(1, perTool);
    if (event.decision === 'unrecorded') instruments.unrecorded.add(1, perTool);
  }
}

/**
 * The request's active span (the SDK's, or the server's own): the decision, whether the answer is a
 * replay, the digest of the scoped key; and, for the guard's own refusals, the error the conventions
 * ask a span to carry. Nothing is computed for a span that records nothing (no SDK, not sampled).
 */
function markActiveSpan(event: DecisionEvent): void {
  const span = trace.getActiveSpan();
  if (!span?.isRecording()) return;
  span.setAttribute(IdempotencyAttributes.decision, event.decision);
  span.setAttribute(IdempotencyAttributes.replayed, event.decision === 'replayed');
  const { scope, idempotencyKey } = event;
  if (scope !== undefined && idempotencyKey !== undefined)
    span.setAttribute(IdempotencyAttributes.keyDigest, scopedKeyDigest({ scope, idempotencyKey }));
  const refusal = REFUSALS[event.decision];
  if (refusal === undefined) return;
  const code = String(idempotencyErrorCode(refusal));
  span.setAttribute('error.type', code);
  span.setAttribute('rpc.response.status_code', code);
  // The error's `data.type`, not its message: a message may quote what the caller sent.
  span.setStatus({ code: SpanStatusCode.ERROR, message: refusal });
}

/** The tool names counted as themselves: the server's list, or the first `MAX_TOOL_NAMES` seen. */
class ToolNames {
  private readonly known: Set<string>;

  constructor(private readonly listed: readonly string[] | undefined) {
    this.known = new Set(listed);
  }

  attributeOf(tool: string | undefined): string | undefined {
    if (tool === undefined || this.known.has(tool)) return tool;
    if (this.listed === undefined && this.known.size < MAX_TOOL_NAMES) {
      this.known.add(tool);
      return tool;
    }
    // The conventions' own fallback value for a name they cannot keep.
    return '_OTHER';
  }
}

/** `MemoryIdempotencyStore` → `memory`; a class named otherwise goes by its own name. */
function storeNameOf(store: IdempotencyStore): string {
  const name = store.constructor.name;
  return name.endsWith('IdempotencyStore') ? name.slice(0, -'IdempotencyStore'.length).toLowerCase() : name;
}

type Operation = 'claim' | 'complete' | 'awaitInput' | 'release' | 'renew' | 'clear' | 'begin';

/**
 * The store, each operation timed by store and operation, so a slow Redis or Postgres shows as
 * itself rather than as a slow guard. A failed operation is timed too, with its `error.type` (the
 * error's class name). Every operation goes through to the store unchanged.
 */
class TimedStore implements IdempotencyStore {
  private readonly attributes: Record<Operation, Attributes>;
  readonly begin?: (ticket: ClaimTicket) => Promise<unknown>;

  constructor(
    private readonly store: IdempotencyStore,
    private readonly storeName: string,
    private readonly duration: Histogram,
  ) {
    // Made once: one object per operation, not one per call.
    const of = (operation: Operation) => this.attributesOf(operation);
    this.attributes = {
      claim: of('claim'),
      complete: of('complete'),
      awaitInput: of('awaitInput'),
      release: of('release'),
      renew: of('renew'),
      clear: of('clear'),
      begin: of('begin'),
    };
    const { begin } = store;
    if (begin) this.begin = (ticket) => this.timed('begin', performance.now(), begin.call(store, ticket));
  }

  claim(id: RecordId, fingerprint: Fingerprint, leaseMs: number, continuation?: boolean): Promise<Claim> {
    return this.timed('claim', performance.now(), this.store.claim(id, fingerprint, leaseMs, continuation));
  }

  complete(ticket: ClaimTicket, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return this.timed('complete', performance.now(), this.store.complete(ticket, response, retentionMs));
  }

  awaitInput(ticket: ClaimTicket, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return this.timed('awaitInput', performance.now(), this.store.awaitInput(ticket, response, retentionMs));
  }

  release(ticket: ClaimTicket): Promise<boolean> {
    return this.timed('release', performance.now(), this.store.release(ticket));
  }

  renew(ticket: ClaimTicket, leaseMs: number): Promise<boolean> {
    return this.timed('renew', performance.now(), this.store.renew(ticket, leaseMs));
  }

  clear(): Promise<void> {
    return this.timed('clear', performance.now(), this.store.clear());
  }

  private timed<T>(operation: Operation, started: number, pending: Promise<T>): Promise<T> {
    return pending.then(
      (value) => {
        this.duration.record((performance.now() - started) / 1000, this.attributes[operation]);
        return value;
      },
      (error: unknown) => {
        const failed = this.attributesOf(operation, error instanceof Error ? error.name : '_OTHER');
        this.duration.record((performance.now() - started) / 1000, failed);
        throw error;
      },
    );
  }

  private attributesOf(operation: Operation, errorType?: string): Attributes {
    return {
      [IdempotencyAttributes.storeName]: this.storeName,
      [IdempotencyAttributes.storeOperation]: operation,
      ...(errorType !== undefined && { 'error.type': errorType }),
    };
  }
}
