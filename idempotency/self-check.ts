// --- Start-up proof that the guard sees idempotency keys ---
//
// The failure this project exists to prevent is quiet: an SDK change strips the key and the
// server goes on serving, deduplicating nothing. So before serving, a throwaway server built
// with the same SDK and the same guard is asked the same keyed question twice over an
// in-memory transport. If the probe tool ran twice, the process refuses to start.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { callTool } from './client.js';
import { type IdempotencyGuardOptions, installIdempotencyGuard } from './guard.js';
import { MemoryIdempotencyStore } from './memory-store.js';

/** @param install how the server under test installs its guard (tests pass a broken one). */
export async function verifyGuardSeesKeys(
  install: (server: Server, options: IdempotencyGuardOptions) => void = installIdempotencyGuard,
): Promise<void> {
  let executions = 0;
  const probe = new McpServer({ name: 'idempotency-self-check', version: '0' });
  probe.registerTool('probe', { inputSchema: { n: z.number() } }, () => {
    executions += 1;
    return { content: [{ type: 'text', text: String(executions) }] };
  });
  install(probe.server, { store: new MemoryIdempotencyStore() });

  const client = new Client({ name: 'idempotency-self-check', version: '0' });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await probe.connect(serverSide);
  await client.connect(clientSide);
  try {
    const call = { name: 'probe', arguments: { n: 1 }, idempotencyKey: 'self-check' };
    await callTool(client, call);
    await callTool(client, call);
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
