// --- The one place this project reaches past the SDK's public API ---
//
// Why it has to: `McpServer` parses `tools/call` params with `CallToolRequestParamsSchema`,
// a plain zod object, so `idempotencyKey` is silently stripped before any handler or tool
// callback sees it (SDK 1.32.x). The same silent stripping is how the Python prototype came
// to "work" on mcp 2.0 while deduplicating nothing.
//
// What it relies on: `Protocol` keeps one function per method in a private map,
// `_requestHandlers`, and calls it with the request exactly as it was read off the wire,
// before any schema parses it. Wrapping the `tools/call` entry puts the guard in front of
// every parse and every tool, with the raw key and the raw arguments in hand.
//
// How it fails loudly: if the map is renamed or reshaped, `rawRequestHandlers` throws at
// start-up. If entries ever stop receiving raw params, `verifyGuardSeesKeys` (run at
// start-up by server.ts) and the wire-level test both fail, instead of the server running on
// without deduplication.

import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import type {
  JSONRPCRequest,
  Result,
  ServerNotification,
  ServerRequest,
} from '@modelcontextprotocol/sdk/types.js';

export type ToolCallExtra = RequestHandlerExtra<ServerRequest, ServerNotification>;

/** A request handler as `Protocol` stores it: raw request in, result (or a throw) out. */
export type RawRequestHandler = (request: JSONRPCRequest, extra: ToolCallExtra) => Promise<Result>;

export function rawRequestHandlers(server: Server): Map<string, RawRequestHandler> {
  const handlers: unknown = Reflect.get(server, '_requestHandlers');
  if (!(handlers instanceof Map)) {
    throw new Error(
      'SEP-3182 guard: this SDK version no longer keeps request handlers where the guard expects ' +
        '(Protocol._requestHandlers); refusing to start without deduplication',
    );
  }
  return handlers;
}
