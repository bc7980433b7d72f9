// --- Protocol-level idempotency dispatch (SEP-3182) ---
//
// The guard wraps the server's `tools/call` dispatch, so it applies to every tool and no
// tool body carries idempotency logic. `guardToolCall` reads top to bottom as the SEP's
// algorithm: no key → validate → fingerprint → claim → conflict? → in progress? → replay
// → execute once and record.

import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { JSONRPCRequest, Result, ServerCapabilities } from '@modelcontextprotocol/sdk/types.js';
import { IdempotencyErrorType, INTERNAL_ERROR, idempotencyError, JsonRpcError, Messages } from './errors.js';
import { fingerprintToolCall } from './fingerprint.js';
import { checkIdempotencyKey } from './key.js';
import { type RawRequestHandler, rawRequestHandlers, type ToolCallExtra } from './sdk-internals.js';
import type { Claim, IdempotencyStore, RecordId, StoredResponse } from './store.js';

/** The prototype's retention: long enough for any sane retry loop, short enough to bound memory. */
export const DEFAULT_RETENTION_MS = 300_000;

/**
 * How long an in-progress claim holds its key if the instance running it dies and never
 * completes it. Twice the SDK client's default request timeout (60 s), so a live but slow
 * call is never mistaken for a dead one by a client retrying at the default pace.
 */
export const DEFAULT_LEASE_MS = 120_000;

/** Over stdio the caller is the local user: one authorization boundary, one scope. */
export const LOCAL_SCOPE = 'local';

/** Callers that present no credentials all share this scope. */
export const ANONYMOUS_SCOPE = 'anonymous';

/**
 * The scope of an authenticated request: the principal the bearer token belongs to (the
 * SDK's `authInfo.clientId`). Without auth every caller shares one anonymous scope, and then
 * a key guessed or reused by another caller does replay: deploy with auth where that matters.
 */
export function principalScope(extra: ToolCallExtra): string {
  return extra.authInfo ? `principal:${extra.authInfo.clientId}` : ANONYMOUS_SCOPE;
}

export type Decision =
  | 'executed'
  | 'replayed'
  | 'conflict'
  | 'inProgress'
  | 'invalid'
  | 'storeFull'
  | 'storeUnavailable'
  /** Executed and answered, but not recorded (store failure, or the lease ran out): a retry may execute again. */
  | 'unrecorded';

export interface DecisionEvent {
  decision: Decision;
  scope?: string;
  idempotencyKey?: string;
  tool?: string;
  message?: string;
  durationMs: number;
}

export interface IdempotencyGuardOptions {
  store: IdempotencyStore;
  retentionMs?: number;
  leaseMs?: number;
  /**
   * The caller's authorization boundary (an OAuth principal, the local user, a workspace).
   * SEP: one caller's key must never replay another caller's result.
   */
  scopeOf?: (extra: ToolCallExtra) => string;
  /** One call per keyed decision, for the operator's log. */
  onDecision?: (event: DecisionEvent) => void;
}

/** The capability a server advertises: `capabilities.tools.idempotency`, intentionally empty. */
export const IDEMPOTENCY_CAPABILITY = { idempotency: {} } as const;

/**
 * Puts the guard in front of `server`'s `tools/call` dispatch and advertises the capability.
 * Call it after the tools are registered (so the dispatch exists) and before `connect`.
 */
export function installIdempotencyGuard(server: Server, options: IdempotencyGuardOptions): void {
  const handlers = rawRequestHandlers(server);
  const dispatch = handlers.get('tools/call');
  if (!dispatch) {
    throw new Error('SEP-3182 guard: no tools/call handler yet; register tools before installing the guard');
  }
  const settings: GuardSettings = {
    store: options.store,
    retentionMs: options.retentionMs ?? DEFAULT_RETENTION_MS,
    leaseMs: options.leaseMs ?? DEFAULT_LEASE_MS,
    scopeOf: options.scopeOf ?? (() => LOCAL_SCOPE),
    onDecision: options.onDecision ?? (() => {}),
  };
  handlers.set('tools/call', (request, extra) => guardToolCall(request, extra, dispatch, settings));

  // The SDK types `tools` as { listChanged?: boolean } but merges and sends whatever object it
  // is given, which is all the SEP asks. (Registered here, after McpServer's own handler
  // exists: passing `tools` to the McpServer constructor would install that handler early.)
  const tools: ServerCapabilities['tools'] & Record<string, unknown> = { ...IDEMPOTENCY_CAPABILITY };
  server.registerCapabilities({ tools });
}

type GuardSettings = Required<IdempotencyGuardOptions>;

async function guardToolCall(
  request: JSONRPCRequest,
  extra: ToolCallExtra,
  dispatch: RawRequestHandler,
  settings: GuardSettings,
): Promise<Result> {
  const params = request.params ?? {};

  // SEP: no key, exactly today's behaviour. Every call executes.
  if (!Object.hasOwn(params, 'idempotencyKey')) return dispatch(request, extra);

  const log = new DecisionLog(settings.onDecision, params.name);

  // The key must be something a store can hold and a log can print.
  const key = checkIdempotencyKey(params.idempotencyKey);
  if (!key.ok) {
    log.decide('invalid', {}, key.message);
    throw idempotencyError(IdempotencyErrorType.invalid, key.message);
  }
  const { key: idempotencyKey } = key;

  // SEP equivalence: same tool name, `arguments` equal as parsed JSON, as sent on the wire.
  const fingerprint = fingerprintToolCall(params.name, params.arguments);
  if (!fingerprint.ok) {
    const message = Messages.argumentsUnfingerprintable(fingerprint.reason);
    log.decide('invalid', { idempotencyKey }, message);
    throw idempotencyError(IdempotencyErrorType.invalid, message, idempotencyKey);
  }

  // One atomic store operation either claims the key or returns what already holds it.
  const id: RecordId = { scope: settings.scopeOf(extra), idempotencyKey };
  let claim: Claim;
  try {
    claim = await settings.store.claim(id, fingerprint.fingerprint, settings.leaseMs);
  } catch (error) {
    // Fail closed: executing without a record would let the retry charge again.
    log.decide('storeUnavailable', id, String(error));
    throw idempotencyError(IdempotencyErrorType.storeUnavailable, Messages.storeUnavailable, idempotencyKey);
  }

  if (claim.state === 'full') {
    log.decide('storeFull', id);
    throw idempotencyError(IdempotencyErrorType.storeFull, Messages.storeFull, idempotencyKey);
  }

  if (claim.state !== 'claimed') {
    // SEP: another request under this key is rejected, never executed and never replayed.
    // Checked before "in progress" because it is final: retrying later cannot help.
    if (claim.fingerprint !== fingerprint.fingerprint) {
      log.decide('conflict', id);
      throw idempotencyError(IdempotencyErrorType.conflict, Messages.conflict, idempotencyKey);
    }
    // SEP: never a second execution, and never block the duplicate: answer at once.
    if (claim.state === 'inProgress') {
      log.decide('inProgress', id);
      throw idempotencyError(IdempotencyErrorType.inProgress, Messages.inProgress, idempotencyKey);
    }
    // SEP: the stored response, success or error, with nothing marking it as a replay.
    log.decide('replayed', id);
    return replay(claim.response);
  }

  // The only path that executes. Whatever the dispatch answers is recorded, errors included.
  const outcome = await settle(() => dispatch(request, extra));
  try {
    const recorded = await settings.store.complete(claim.ticket, outcome.stored, settings.retentionMs);
    // Not recorded: the call outlived its lease and a retry has claimed the key since (or the
    // store was cleared). The lease was too short for this tool; the operator should know.
    if (recorded) log.decide('executed', id);
    else log.decide('unrecorded', id, Messages.leaseOutlived);
  } catch (error) {
    // The caller still gets its answer; only a retry of a lost answer could execute again,
    // once the lease expires. That is the at-least-once window the SEP leaves to servers.
    log.decide('unrecorded', id, String(error));
  }
  if (outcome.threw) throw outcome.error;
  return outcome.result;
}

/**
 * Tells `onDecision` what was decided for one keyed call, and how long deciding took.
 * (A class, not a closure made per call: under tsx, esbuild names every such closure with
 * Object.defineProperty as it is made, which showed up in the benchmark's profile.)
 */
class DecisionLog {
  private readonly started = performance.now();
  private readonly tool: string | undefined;

  constructor(
    private readonly onDecision: (event: DecisionEvent) => void,
    name: unknown,
  ) {
    this.tool = typeof name === 'string' ? name : undefined;
  }

  decide(decision: Decision, id?: Partial<RecordId>, message?: string): void {
    try {
      this.onDecision({
        decision,
        ...id,
        tool: this.tool,
        message,
        durationMs: roundMs(performance.now() - this.started),
      });
    } catch {
      // A failing log line must never change what the caller is answered.
    }
  }
}

type Outcome =
  | { threw: false; result: Result; stored: StoredResponse }
  | { threw: true; error: unknown; stored: StoredResponse };

/** Runs the dispatch, catching a synchronous throw too: the SDK's own parse throws before any promise exists. */
async function settle(run: () => Promise<Result>): Promise<Outcome> {
  try {
    const result = await run();
    return { threw: false, result, stored: { result } };
  } catch (error) {
    return { threw: true, error, stored: { error: asWireError(error) } };
  }
}

function replay(response: StoredResponse): Result {
  if ('result' in response) return response.result;
  const { code, message, data } = response.error;
  throw new JsonRpcError(code, message, data);
}

/** The error object the SDK's Protocol writes for a thrown value (shared/protocol.js). */
function asWireError(error: unknown): { code: number; message: string; data?: unknown } {
  const field = (name: string): unknown =>
    typeof error === 'object' && error !== null ? Reflect.get(error, name) : undefined;
  const code = field('code');
  const message = field('message');
  const data = field('data');
  return {
    code: typeof code === 'number' && Number.isSafeInteger(code) ? code : INTERNAL_ERROR,
    message: typeof message === 'string' ? message : 'Internal error',
    ...(data !== undefined && { data }),
  };
}

function roundMs(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}
