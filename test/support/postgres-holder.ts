// A server process that claims one key and then runs forever, for the dead-holder tests: the
// test kills it (SIGKILL, as a crash would) or leaves it running, and claims the same key itself.
//
// Usage: tsx test/support/postgres-holder.ts URL TABLE_PREFIX SCOPE KEY LEASE_MS
// Prints one line once the claim is made: {"state":"claimed","lock":"…"} (its store's liveness lock).

import { PostgresIdempotencyStore } from 'mcp-request-idempotency/postgres';

const [url, tablePrefix, scope, idempotencyKey, leaseMs] = process.argv.slice(2);
if (!url || !tablePrefix || !scope || !idempotencyKey || !leaseMs) {
  throw new Error('usage: postgres-holder.ts URL TABLE_PREFIX SCOPE KEY LEASE_MS');
}

const store = await PostgresIdempotencyStore.connect(url, { tablePrefix, migrate: false });
const claim = await store.claim({ scope, idempotencyKey }, 'fingerprint-of-the-holder', Number(leaseMs));
process.stdout.write(`${JSON.stringify({ state: claim.state, lock: store.livenessLock.lock })}\n`);
// The call "runs" until the test ends it: nothing settles the claim.
setInterval(() => {}, 60_000);
