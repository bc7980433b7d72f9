// A server process on a SQLite file that has run out of file descriptors (EMFILE), as a busy
// server under `ulimit -n` can: it opens the store, takes every descriptor left, then claims one
// key, and prints what the claim answered ({"state":"…"}).
//
// Usage: sh -c 'ulimit -n 200; exec node --import tsx test/support/sqlite-starved.ts FILE SCOPE KEY'

import { closeSync, openSync } from 'node:fs';
import { SqliteIdempotencyStore } from 'mcp-request-idempotency/sqlite';

const [file, scope, idempotencyKey] = process.argv.slice(2);
if (!file || !scope || !idempotencyKey) throw new Error('usage: sqlite-starved.ts FILE SCOPE KEY');

const store = await SqliteIdempotencyStore.open(file);
const taken: number[] = [];
try {
  for (;;) taken.push(openSync('/dev/null', 'r'));
} catch (error) {
  if (Reflect.get(Object(error), 'code') !== 'EMFILE') throw error;
}
const claim = await store.claim({ scope, idempotencyKey }, 'starved', 120_000).catch((error: unknown) => ({
  state: `rejected: ${String(error)}`,
}));
for (const fd of taken) closeSync(fd);
process.stdout.write(`${JSON.stringify({ state: claim.state, descriptorsTaken: taken.length })}\n`);
await store.close();
