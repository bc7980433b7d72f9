// Real server processes over stdio: an SDK client's, and a second one like it for raw JSON-RPC.

import { join } from 'node:path';
import { connectToServer, type StdioConnectOptions } from '../../demo/processes/launch.js';
import { connect } from '../../packages/checker/wire.js';
import { type Connection, PEER_TIMEOUT_MS } from './sep-cases.js';

const ROOT = join(import.meta.dirname, '..', '..');

/**
 * `script` (default `server.ts`) with `args`, twice: one process for an SDK client, one for the
 * shared rules, which write their requests byte by byte (a stdio server has one client).
 */
export async function connectStdio(
  args: string[],
  { era, script = 'server.ts' }: StdioConnectOptions,
): Promise<Connection> {
  const command = {
    kind: 'stdio' as const,
    command: process.execPath,
    args: ['--import', 'tsx', join(ROOT, script), ...args],
  };
  const [sdk, peer] = await Promise.all([
    connectToServer(args, { era, script }),
    connect(command, { era: era ?? 'auto', timeoutMs: PEER_TIMEOUT_MS }),
  ]);
  return {
    client: sdk.client,
    peer,
    close: async () => {
      await Promise.all([sdk.close(), peer.close()]);
    },
  };
}
