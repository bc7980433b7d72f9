// --- Where a first execution's cost goes on Redis, layer by layer ---
//
//   SEP3182_BENCH_PEERS_REDIS_URL=redis://127.0.0.1:6391 node --import tsx test/bench/peers/layers.ts [rounds] [calls]
//
// What `npm run bench -- peers` shows as one figure, taken apart. Each row adds one layer to the
// row above it, on a fresh key every call, interleaved round by round (harness.ts):
//   two plain SETs, as @node-idempotency's Redis adapter sends them;
//   two EVALSHAs of a script that does nothing: the guard's round trips alone;
//   the store's claim and record scripts, sent as the store sends them: Redis' own work in them;
//   the store's claim and complete: the store's JavaScript around them;
//   the guard, a charge behind it: the guard's own work.
// The difference between two rows is what that layer costs. Not part of the bench's verdicts.

import { randomUUID } from 'node:crypto';
import { createClient } from '@redis/client';
import { createToolCallGuard } from 'mcp-request-idempotency';
import { RedisIdempotencyStore, redisKeysOf } from 'mcp-request-idempotency/redis';
import { CLAIM_SCRIPT, COMPLETE_SCRIPT } from '../../../packages/idempotency/stores/redis/scripts.js';
import { AMOUNT, chargeResult, TOOL } from '../calls.js';
import { interleave, PEERS_REDIS_URL_ENV, table, us, type Variant } from '../harness.js';

const RETENTION_MS = 3_600_000;
const LEASE_MS = 60_000;
const ROOM = { maxRecordsPerScope: 10_000_000, maxBytesPerScope: 2 ** 40 };
const FINGERPRINT = 'x'.repeat(43);
const RESPONSE = { result: chargeResult(1, AMOUNT) };

const [rounds = 12, calls = 500] = process.argv.slice(2).map(Number);
const url = process.env[PEERS_REDIS_URL_ENV];
if (!url) throw new Error(`set ${PEERS_REDIS_URL_ENV} to a Redis to measure on`);
const prefix = `layers-${randomUUID().slice(0, 8)}:`;
const connection = await createClient({ url }).connect();
// As the store sends its scripts: without node-redis' own timeout per command.
const client = connection.withCommandOptions({ timeout: 0 });
const store = await RedisIdempotencyStore.connect(url, { ...ROOM, keyPrefix: prefix });
const guard = createToolCallGuard({ store, retentionMs: RETENTION_MS, providerKeyRetentionMs: RETENTION_MS });
const nothing = await client.scriptLoad('return 1');
const claimSha = await client.scriptLoad(CLAIM_SCRIPT);
const completeSha = await client.scriptLoad(COMPLETE_SCRIPT);
const key = () => `${prefix}${randomUUID()}`;
const value = JSON.stringify({ state: 'inProgress', fingerprint: FINGERPRINT, token: randomUUID() });

const layer = (name: string, call: () => Promise<unknown>): Variant => ({ name, call, check() {} });
const variants = [
  layer('two SETs (as @node-idempotency)', async () => {
    const at = key();
    await client.set(at, value, { NX: true, PX: LEASE_MS });
    await client.set(at, value, { PX: RETENTION_MS });
  }),
  layer('two EVALSHAs of nothing', async () => {
    const keys = [key()];
    await client.evalSha(nothing, { keys, arguments: [value] });
    await client.evalSha(nothing, { keys, arguments: [value] });
  }),
  layer("the store's two scripts", async () => {
    const token = randomUUID();
    const keys = [...redisKeysOf(prefix, { scope: 'layers', idempotencyKey: token }), `${prefix}alive`];
    const claimed = JSON.stringify({ state: 'inProgress', fingerprint: FINGERPRINT, token });
    const quota = [String(ROOM.maxRecordsPerScope), String(ROOM.maxBytesPerScope)];
    const reply = await client.evalSha(claimSha, {
      keys,
      arguments: [claimed, String(LEASE_MS), ...quota, '', token],
    });
    const json = JSON.stringify(RESPONSE);
    const record = `{"state":"completed","fingerprint":"${FINGERPRINT}","response":${json}}`;
    const epoch = String((reply as unknown[])[1]);
    const args = [claimed, record, String(RETENTION_MS), String(json.length), epoch, token];
    await client.evalSha(completeSha, { keys, arguments: args });
  }),
  layer("the store's claim and complete", async () => {
    const claim = await store.claim({ scope: 'layers', idempotencyKey: randomUUID() }, FINGERPRINT, LEASE_MS);
    if (claim.state !== 'claimed') throw new Error(`not claimed: ${claim.state}`);
    await store.complete(claim.ticket, RESPONSE, RETENTION_MS);
  }),
  layer('the guard, a charge behind it', () => {
    const args = { amount: AMOUNT };
    return guard({ name: TOOL, arguments: args, idempotencyKey: randomUUID() }, {}, async () =>
      chargeResult(1, AMOUNT),
    );
  }),
];

try {
  const rows = await interleave([{ meta: {}, batchCalls: calls, variants }], { rounds, warmupRounds: 2 });
  process.stdout.write(
    `${table(
      'layer | median µs | over the row above µs',
      rows.map((row, i) => [
        row.variant,
        us(row.medianUs),
        i ? us(row.medianUs - (rows[i - 1]?.medianUs ?? 0)) : '',
      ]),
    )}\n`,
  );
} finally {
  await store.close();
  await connection.close();
}
