// --- The guard on the current SDK line: @modelcontextprotocol/server 2.x ---
//
// v2 strips `idempotencyKey` in both protocol eras before any handler sees it, and has no public
// pre-dispatch hook, so the guard wraps the private `tools/call` entry (`hook.ts`). v2 calls that
// entry after it has checked the 2026-07-28 envelope and lifted it (and `inputResponses` and
// `requestState`) out of the params; the key and `arguments` are still as sent, and the adapter
// puts the lifted multi-round-trip fields back, so the guard sees a continuation as sent. Both
// entry points, `serveStdio` and `createMcpHandler`, dispatch through it.
//
// The loud failure: installation throws if the entry moves, and `verifyGuardSeesKeys` (run at
// start-up) refuses to start, in either era, if keys stop arriving.

import { Client, InMemoryTransport as ClientInMemoryTransport } from '@modelcontextprotocol/client';
import {
  McpServer,
  type Server,
  type ServerCapabilities,
  type ServerContext,
} from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import { z } from 'zod';
import { IDEMPOTENCY_CAPABILITY } from '../core/capability.js';
import type { IdempotencyGuardOptions } from '../core/options.js';
import { LEGACY_PROTOCOL_VERSION, MODERN_PROTOCOL_VERSION } from '../core/protocol.js';
import { MemoryIdempotencyStore } from '../stores/memory.js';
import { type EntryReader, guardToolsCallEntry } from './hook.js';

const v2Entry: EntryReader<ServerContext> = {
  /** The caller as v2 hands it to a handler: the verified token the HTTP entry passed through. */
  callerOf(ctx) {
    const authInfo = ctx.http?.authInfo;
    return authInfo ? { authInfo } : {};
  },
  signalOf: (ctx) => ctx.mcpReq.signal,
  /** The params with the continuation fields v2 lifted into `ctx.mcpReq` put back. */
  paramsOf(params, ctx) {
    const { inputResponses } = ctx.mcpReq;
    const requestState = ctx.mcpReq.requestState();
    if (inputResponses === undefined && requestState === undefined) return params;
    return {
      ...params,
      ...(inputResponses !== undefined && { inputResponses }),
      ...(requestState !== undefined && { requestState }),
    };
  },
};

/**
 * Puts the guard in front of `server`'s `tools/call` dispatch and advertises the capability in
 * `server/discover` and in the 2025 initialize result. Call it in the server factory, after the
 * tools are registered (so the dispatch exists) and before the entry point connects it.
 */
export function installIdempotencyGuard(server: McpServer | Server, options: IdempotencyGuardOptions): void {
  const target = server instanceof McpServer ? server.server : server;
  guardToolsCallEntry(target, v2Entry, options);

  // The SDK types `tools` as { listChanged?: boolean } but merges and sends whatever object it
  // is given, which is all the SEP asks.
  const tools: ServerCapabilities['tools'] & Record<string, unknown> = { ...IDEMPOTENCY_CAPABILITY };
  target.registerCapabilities({ tools });
}

// --- Start-up proof that the guard sees idempotency keys, in both eras ---
//
// The failure this project exists to prevent is quiet: an SDK change strips the key and the
// server goes on serving, deduplicating nothing. So before serving, a throwaway server built
// with the same SDK and the same guard is asked the same keyed question twice, once by a
// 2026-07-28 client and once by a 2025-11-25 client, through the SDK's own `serveStdio` entry
// over an in-memory transport. If the probe tool ran twice in either era, startup fails.

/** @param install how the server under test installs its guard (tests pass a broken one). */
export async function verifyGuardSeesKeys(
  install: (server: McpServer, options: IdempotencyGuardOptions) => void = installIdempotencyGuard,
): Promise<void> {
  for (const era of [MODERN_PROTOCOL_VERSION, LEGACY_PROTOCOL_VERSION]) {
    let executions = 0;
    const probe = () => {
      const mcp = new McpServer({ name: 'idempotency-self-check', version: '0' });
      mcp.registerTool('probe', { inputSchema: z.object({ n: z.number() }) }, () => {
        executions += 1;
        return { content: [{ type: 'text', text: String(executions) }] };
      });
      install(mcp, { store });
      return mcp;
    };
    const store = new MemoryIdempotencyStore();
    const [clientSide, serverSide] = ClientInMemoryTransport.createLinkedPair();
    const served = serveStdio(probe, { transport: serverSide });
    const client = new Client(
      { name: 'idempotency-self-check', version: '0' },
      era === MODERN_PROTOCOL_VERSION ? { versionNegotiation: { mode: { pin: era } } } : {},
    );
    try {
      await client.connect(clientSide);
      const call = { name: 'probe', arguments: { n: 1 }, idempotencyKey: 'self-check' };
      // The SDK client's `callTool` has no place for the key; its `request` sends it unchanged.
      const ask = () => client.request({ method: 'tools/call', params: call });
      await ask();
      await ask();
    } finally {
      await client.close();
      await served.close();
    }
    if (executions !== 1) {
      throw new Error(
        `SEP-3182 guard self-check failed: a keyed ${era} call executed ${executions} times. ` +
          'This SDK version no longer delivers params.idempotencyKey to the guard; refusing to start.',
      );
    }
  }
}
