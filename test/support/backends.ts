// The Redis and the Postgres a test file runs against: started once for the file (or the shared one
// REDIS_URL or DATABASE_URL names), stopped after its tests, and absent, with the reason on the
// console, where the machine has neither. A file's own `afterAll` (dropping its tables, say) runs
// before the stop: vitest runs a file's after-hooks last registered first.

import { afterAll } from 'vitest';
import {
  POSTGRES_SKIP_REASON,
  startPostgres,
  type TestPostgres,
} from '../../demo/processes/postgres-server.js';
import { REDIS_SKIP_REASON, startRedis, type TestRedis } from '../../demo/processes/redis-server.js';

/** What `startRedis` and `startPostgres` hand back: a server, and whether this process started it. */
interface TestServer {
  /** False for the shared server a URL names: tests must not kill, freeze or restart it. */
  owned: boolean;
  stop(): Promise<void>;
}

async function serverForFile<S extends TestServer>(
  start: () => Promise<S | undefined>,
  skipReason: string,
  onShared: string | undefined,
): Promise<S | undefined> {
  const server = await start();
  if (!server) console.warn(skipReason);
  else if (!server.owned && onShared) console.warn(onShared);
  afterAll(async () => {
    await server?.stop();
  });
  return server;
}

/**
 * The file's Redis. `onShared` is what the file says when the Redis is a shared one (REDIS_URL),
 * which its tests must not kill or freeze: the tests it skips, and why.
 */
export const redisForFile = (onShared?: string): Promise<TestRedis | undefined> =>
  serverForFile(startRedis, REDIS_SKIP_REASON, onShared);

/**
 * The file's Postgres. `onShared` is what the file says when the cluster is a shared one
 * (DATABASE_URL), which its tests must not stop or restart: the tests it skips, and why.
 */
export const postgresForFile = (onShared?: string): Promise<TestPostgres | undefined> =>
  serverForFile(startPostgres, POSTGRES_SKIP_REASON, onShared);
