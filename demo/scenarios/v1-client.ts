// --- Scenario 8: a client on the v1 SDK line, speaking 2025-11-25 ---
//
// The same server, reached the old way: `initialize`, then tools/call. The v1 SDK knows nothing
// of the key, and need not: the key is one more params field, and the deduplication is the same.

import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { Client as V1Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as V1StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { CallToolResultSchema as V1CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { advertisesIdempotency } from 'mcp-request-idempotency/client';
import { expect, heading, say } from './narration.js';

/** The repository's root, where server.ts is. */
const ROOT = join(import.meta.dirname, '..', '..');

export async function v1ClientSameDeduplication(): Promise<void> {
  const s = '8 v1 SDK client';
  heading(
    'Scenario 8: a client on the v1 SDK, protocol 2025-11-25',
    '@modelcontextprotocol/sdk 1.32: initialize, then charge_guarded(100) twice with one key, against the same server.',
  );
  const transport = new V1StdioClientTransport({
    command: process.execPath,
    args: ['--import', 'tsx', join(ROOT, 'server.ts')],
    cwd: ROOT,
    stderr: 'ignore',
  });
  const capabilities = new Promise<unknown>((resolve) => {
    transport.onmessage = (message) => {
      if ('result' in message && typeof message.result.protocolVersion === 'string') {
        resolve({
          protocolVersion: message.result.protocolVersion,
          capabilities: message.result.capabilities,
        });
      }
    };
  });
  const client = new V1Client({ name: 'sep-3182-v1-client', version: '0.1.0' });
  await client.connect(transport);
  try {
    say(`  initialize result, as sent: ${JSON.stringify(await capabilities)}`);
    // v1's callTool has no place for the key; its request sends extra params fields unchanged.
    const params = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
    const first = await client.request({ method: 'tools/call', params }, V1CallToolResultSchema);
    const retry = await client.request({ method: 'tools/call', params }, V1CallToolResultSchema);
    say(
      `  attempt 1: ${JSON.stringify(first.structuredContent)}; retry, same key: ${JSON.stringify(retry.structuredContent)}`,
    );
    expect(
      s,
      'the initialize result advertises the capability',
      advertisesIdempotency(Reflect.get(Object(await capabilities), 'capabilities')),
      'tools.idempotency',
    );
    expect(
      s,
      'the retry got the stored response, unchanged',
      isDeepStrictEqual(first, retry),
      JSON.stringify(retry.structuredContent),
    );
    const balance = await client.request(
      { method: 'tools/call', params: { name: 'get_balance', arguments: {} } },
      V1CallToolResultSchema,
    );
    const charged = Reflect.get(Object(balance.structuredContent), 'balance');
    expect(s, 'charged once', charged === 100, `balance ${charged}`);
  } finally {
    await client.close();
  }
}
