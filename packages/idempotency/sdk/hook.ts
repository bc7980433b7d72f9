// --- Where the guard meets an SDK: the private `tools/call` entry both SDK lines keep ---
//
// Both lines of the TypeScript SDK (`@modelcontextprotocol/sdk` 1.x and
// `@modelcontextprotocol/server` 2.x) strip `idempotencyKey` before any public handler sees it,
// and neither has a public pre-dispatch hook. Both keep one function per method in `Protocol`'s
// private `_requestHandlers` map and call it with the request as it came off the wire. Wrapping
// the `tools/call` entry puts the guard in front of every parse and every tool. Each adapter
// (`v1.ts`, `v2.ts`) says how its line hands over the caller, and proves at start-up that
// keys still arrive.

import { createToolCallGuard } from '../core/guard.js';
import type { IdempotencyGuardOptions } from '../core/options.js';
import type { Caller } from '../core/scope.js';
import type { JsonObject } from '../stores/contract.js';

/** A request handler as `Protocol` stores it: the raw request and the SDK's context in, a result (or a throw) out. */
type RawRequestHandler<Ctx> = (
  request: { params?: Record<string, unknown> },
  ctx: Ctx,
) => Promise<JsonObject>;

function rawRequestHandlers<Ctx>(server: object): Map<string, RawRequestHandler<Ctx>> {
  const handlers: unknown = Reflect.get(server, '_requestHandlers');
  if (!(handlers instanceof Map)) {
    throw new Error(
      'SEP-3182 guard: this SDK version no longer keeps request handlers where the guard expects ' +
        '(Protocol._requestHandlers); refusing to start without deduplication',
    );
  }
  return handlers;
}

/** How an adapter hands the guard the request: who is calling, and the params as sent. */
export interface EntryReader<Ctx> {
  callerOf(ctx: Ctx): Caller;
  /** The params as they came off the wire; by default the request's own. */
  paramsOf?(params: Record<string, unknown>, ctx: Ctx): Readonly<Record<string, unknown>>;
  /** The request's abort signal, which the SDK fires when the client cancels or hangs up. */
  signalOf(ctx: Ctx): AbortSignal;
}

/**
 * Wraps the `tools/call` entry of `server` (an SDK `Server`, not an `McpServer`) with the guard.
 * Throws if the SDK no longer keeps the entry where expected, or if no tool is registered yet.
 */
export function guardToolsCallEntry<Ctx>(
  server: object,
  reader: EntryReader<Ctx>,
  options: IdempotencyGuardOptions,
): void {
  const handlers = rawRequestHandlers<Ctx>(server);
  const dispatch = handlers.get('tools/call');
  if (!dispatch) {
    throw new Error('SEP-3182 guard: no tools/call handler yet; register tools before installing the guard');
  }
  const guard = createToolCallGuard(options);
  const paramsOf = reader.paramsOf ?? ((params) => params);
  handlers.set('tools/call', (request, ctx) =>
    guard(
      paramsOf(request.params ?? {}, ctx),
      reader.callerOf(ctx),
      () => dispatch(request, ctx),
      reader.signalOf(ctx),
    ),
  );
}
