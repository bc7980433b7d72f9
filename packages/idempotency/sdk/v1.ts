// --- The guard on the v1 SDK line: @modelcontextprotocol/sdk 1.32.x (protocol up to 2025-11-25) ---
//
// For the many servers still on `@modelcontextprotocol/sdk`: the same guard as `v2.ts`, with
// the same loud failure. v1's `McpServer` parses `tools/call` params with a plain zod object, so
// `idempotencyKey` is silently stripped before any handler or tool callback sees it (the same
// silent stripping is how the Python prototype came to "work" on mcp 2.0 while deduplicating
// nothing); the guard wraps the private `tools/call` entry (`hook.ts`), which v1 calls with the
// request exactly as it was read off the wire.
//
// The loud failure: installation throws if the entry moves, and `verifyGuardSeesKeys` throws if
// keys stop arriving; a server should refuse to start on it.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import {
  CallToolResultSchema,
  type ServerCapabilities,
  type ServerNotification,
  type ServerRequest,
} from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { IDEMPOTENCY_CAPABILITY } from '../core/capability.js';
import type { IdempotencyGuardOptions } from '../core/options.js';
import type { Caller } from '../core/scope.js';
import { MemoryIdempotencyStore } from '../stores/memory.js';
import { guardToolsCallEntry } from './hook.js';

type Extra = RequestHandlerExtra<ServerRequest, ServerNotification>;

/** The caller as v1 hands it to a handler: the bearer middleware's `authInfo`, if any. */
function callerOf(extra: Extra): Caller {
  return extra.authInfo ? { authInfo: extra.authInfo } : {};
}

/**
 * Puts the guard in front of `server`'s `tools/call` dispatch and advertises the capability in
 * the initialize result. Call it after the tools are registered (so the dispatch exists) and
 * before `connect`.
 */
export function installIdempotencyGuard(server: McpServer | Server, options: IdempotencyGuardOptions): void {
  const target = server instanceof McpServer ? server.server : server;
  guardToolsCallEntry(target, { callerOf, signalOf: (extra) => extra.signal }, options);

  // The SDK types `tools` as { listChanged?: boolean } but merges and sends whatever object it
  // is given, which is all the SEP asks. (Registered here, after McpServer's own handler
  // exists: passing `tools` to the McpServer constructor would install that handler early.)
  const tools: ServerCapabilities['tools'] & Record<string, unknown> = { ...IDEMPOTENCY_CAPABILITY };
  target.registerCapabilities({ tools });
}

/**
 * Start-up proof that the guard sees idempotency keys: a throwaway server built with the same
 * SDK and the same guard is asked the same keyed question twice over an in-memory transport.
 * If the probe tool ran twice, this throws; a server should refuse to start on it.
 * @param install how the server under test installs its guard (tests pass a broken one).
 */
export async function verifyGuardSeesKeys(
  install: (server: McpServer, options: IdempotencyGuardOptions) => void = installIdempotencyGuard,
): Promise<void> {
  let executions = 0;
  const probe = new McpServer({ name: 'idempotency-self-check', version: '0' });
  probe.registerTool('probe', { inputSchema: { n: z.number() } }, () => {
    executions += 1;
    return { content: [{ type: 'text', text: String(executions) }] };
  });
  install(probe, { store: new MemoryIdempotencyStore() });

  const client = new Client({ name: 'idempotency-self-check', version: '0' });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await probe.connect(serverSide);
  await client.connect(clientSide);
  try {
    // v1's `callTool` has no place for the key; its `request` sends extra params fields unchanged.
    const params = { name: 'probe', arguments: { n: 1 }, idempotencyKey: 'self-check' };
    await client.request({ method: 'tools/call', params }, CallToolResultSchema);
    await client.request({ method: 'tools/call', params }, CallToolResultSchema);
  } finally {
    await client.close();
    await probe.close();
  }
  if (executions !== 1) {
    throw new Error(
      `SEP-3182 guard self-check failed: a keyed call executed ${executions} times. ` +
        'This SDK version no longer delivers params.idempotencyKey to the guard; refusing to start.',
    );
  }
}
