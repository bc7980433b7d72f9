// --- Scenarios 9 to 11: scale-out, two stateless HTTP instances sharing one Redis ---
//
// One setup for the three: instances A and B, each with a slow charge, their records in one
// Redis, and bearer tokens for two principals. A retry may land on either instance; the records,
// and who may see them, must be the same on both.

import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import { callTool, callToolIdempotently } from 'mcp-request-idempotency/client';
import {
  balanceOf,
  connectHttpClient,
  type HttpInstance,
  postModern,
  resetLedger,
  startHttpInstance,
} from '../processes/launch.js';
import { startRedis } from '../processes/redis-server.js';
import { backendFor, DEMO_REDIS_PREFIX, REDIS_ABSENT } from './installed-backends.js';
import { expect, heading, say, textOf } from './narration.js';
import { IMPATIENT_RETRIES, IMPATIENT_TIMEOUT_MS, SLOW_CHARGE_MS } from './timings.js';

/** alice holds two tokens: one that may charge (and read), one that may only read. */
const DEMO_TOKENS = { alice: 'token-a', aliceReadOnly: 'token-a-read', bob: 'token-b' };

interface ScaleOut {
  a: HttpInstance;
  b: HttpInstance;
  close(): Promise<void>;
}

async function startScaleOut(redisUrl: string): Promise<ScaleOut> {
  const args = ['--store', 'redis', '--redis-url', redisUrl, '--redis-prefix', DEMO_REDIS_PREFIX];
  const env = {
    DEMO_BEARER_TOKENS: `alice:${DEMO_TOKENS.alice}:charge+refund+read+admin,alice:${DEMO_TOKENS.aliceReadOnly}:read,bob:${DEMO_TOKENS.bob}`,
  };
  const [a, b] = await Promise.all([
    startHttpInstance([...args, '--charge-latency-ms', String(SLOW_CHARGE_MS)], env),
    startHttpInstance([...args, '--charge-latency-ms', String(SLOW_CHARGE_MS)], env),
  ]);
  return { a, b, close: async () => void (await Promise.all([a.stop(), b.stop()])) };
}

/**
 * Scenarios 9 to 11 need a Redis both instances share: a private redis-server on loopback when
 * one is installed (as the tests start), else the one at REDIS_URL.
 */
export async function runScaleOutScenarios(required: boolean): Promise<void> {
  const redis = await backendFor('Scenarios 9–11 (scale-out on Redis)', startRedis, REDIS_ABSENT, required);
  if (!redis) return;
  const cluster = await startScaleOut(redis.url);
  try {
    await retryLandsElsewhere(cluster);
    await principalsShareNothing(cluster);
    await authorizationAtReplay(cluster);
  } finally {
    await cluster.close();
    await redis.flush(DEMO_REDIS_PREFIX);
    await redis.stop();
  }
}

async function keyedDecisions(instance: HttpInstance, idempotencyKey: string): Promise<string[]> {
  return (await instance.decisions())
    .filter((d) => d.idempotencyKey === idempotencyKey)
    .map((d) => String(d.decision));
}

async function retryLandsElsewhere({ a, b }: ScaleOut): Promise<void> {
  const s = '9 scale-out retry';
  heading(
    'Scenario 9: the retry lands on another instance',
    `Alice's call reaches instance A (a ${SLOW_CHARGE_MS} ms charge); her client gives up after ${IMPATIENT_TIMEOUT_MS} ms; the retry goes to instance B.`,
  );
  const [viaA, viaB] = await Promise.all([
    connectHttpClient(a.url, { token: DEMO_TOKENS.alice }),
    connectHttpClient(b.url, { token: DEMO_TOKENS.alice }),
  ]);
  try {
    await resetLedger(viaA);
    const { result, attempts, idempotencyKey } = await callToolIdempotently(
      [viaA, viaB],
      { name: 'charge_guarded', arguments: { amount: 100 } },
      {
        policy: IMPATIENT_RETRIES,
        onAttempt: (t) =>
          say(
            `  attempt ${t.attempt} → instance ${t.client === 0 ? 'A' : 'B'} at ${Math.round(t.elapsedMs)} ms: ${t.outcome}`,
          ),
      },
    );
    say(`  final answer: ${textOf(result)}`);
    const second = attempts[1];
    expect(
      s,
      'the first attempt, on A, timed out',
      attempts[0]?.outcome === 'timedOut' && attempts[0].client === 0,
      `${attempts[0]?.outcome}`,
    );
    expect(
      s,
      'the retry on B got in progress while A still ran',
      second?.client === 1 && second.outcome === 'inProgress',
      `${second?.outcome}`,
    );
    expect(
      s,
      'a later retry got the stored response',
      textOf(result) === 'Charged 100. New balance: 100',
      textOf(result),
    );
    const onA = await keyedDecisions(a, idempotencyKey);
    const onB = await keyedDecisions(b, idempotencyKey);
    say(`  instance A decided: ${onA.join(', ')}`);
    say(`  instance B decided: ${onB.join(', ')}`);
    expect(
      s,
      'only A executed; B never did',
      onA.filter((d) => d === 'executed').length === 1 && !onB.includes('executed'),
      `A: ${onA.length}, B: ${onB.length} decisions`,
    );
    const balance = await balanceOf(viaB);
    expect(s, 'one charge in the shared ledger', balance === 100, `balance ${balance}`);
  } finally {
    await Promise.all([viaA.close(), viaB.close()]);
  }
}

async function principalsShareNothing({ a, b }: ScaleOut): Promise<void> {
  const s = '10 per-principal scope';
  heading(
    'Scenario 10: two principals, one key',
    'Alice (on A) and Bob (on B) both send charge_guarded(100) with the same key, then retry on the other instance.',
  );
  const clients = await Promise.all([
    connectHttpClient(a.url, { token: DEMO_TOKENS.alice }),
    connectHttpClient(b.url, { token: DEMO_TOKENS.alice }),
    connectHttpClient(b.url, { token: DEMO_TOKENS.bob }),
    connectHttpClient(a.url, { token: DEMO_TOKENS.bob }),
  ]);
  const [aliceA, aliceB, bobB, bobA] = clients;
  if (!aliceA || !aliceB || !bobB || !bobA) throw new Error('unreachable: four clients were connected');
  try {
    await resetLedger(aliceA);
    const idempotencyKey = randomUUID();
    const call = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey };
    const alice = await callTool(aliceA, call);
    const bob = await callTool(bobB, call);
    say(`  alice on A: ${textOf(alice)}`);
    say(`  bob on B:   ${textOf(bob)}   <- his own execution, not alice's stored response`);
    const aliceRetry = await callTool(aliceB, call);
    const bobRetry = await callTool(bobA, call);
    expect(
      s,
      "bob's call executed on its own, not replaying alice's",
      textOf(bob) === 'Charged 100. New balance: 200',
      textOf(bob),
    );
    expect(
      s,
      'each retry, on the other instance, replays its own principal’s response',
      isDeepStrictEqual(aliceRetry, alice) && isDeepStrictEqual(bobRetry, bob),
      'alice ↔ alice, bob ↔ bob',
    );
    const balance = await balanceOf(aliceB);
    expect(s, 'each principal charged once', balance === 200, `balance ${balance}`);
  } finally {
    await Promise.all(clients.map((c) => c.close()));
  }
}

async function authorizationAtReplay({ a, b }: ScaleOut): Promise<void> {
  const s = '11 authorization at replay';
  heading(
    'Scenario 11: a replay is authorized like an execution',
    'SEP: "A replayed response MUST still be subject to whatever authorization check would ordinarily govern access to it". Alice charges on A with a token that may charge; her retry, same key, reaches B with a token of hers that may only read.',
  );
  const asAlice = (token: string) => ({ authorization: `Bearer ${token}` });
  const params = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
  const [alice, reader] = await Promise.all([
    connectHttpClient(a.url, { token: DEMO_TOKENS.alice }),
    connectHttpClient(a.url, { token: DEMO_TOKENS.aliceReadOnly }),
  ]);
  try {
    await resetLedger(alice);
    const charged = await postModern(
      a.url,
      { id: 1, method: 'tools/call', params },
      undefined,
      asAlice(DEMO_TOKENS.alice),
    );
    say(
      `  on A, token that may charge: ${charged.status} ${JSON.stringify(Reflect.get(Object(Reflect.get(Object(await charged.json()), 'result')), 'structuredContent'))}`,
    );
    const retry = await postModern(
      b.url,
      { id: 2, method: 'tools/call', params },
      undefined,
      asAlice(DEMO_TOKENS.aliceReadOnly),
    );
    const challenge = retry.headers.get('www-authenticate') ?? '';
    say(`  on B, read-only token, same key: ${retry.status} ${challenge}`);
    const body = await retry.text();
    expect(
      s,
      'refused as an execution would be: 403 insufficient_scope',
      retry.status === 403 && challenge.includes('insufficient_scope'),
      `${retry.status}`,
    );
    expect(s, 'the stored response was not replayed to it', !body.includes('Charged'), body);
    const balance = await balanceOf(reader);
    expect(s, 'nothing executed: one charge', balance === 100, `balance ${balance}`);
  } finally {
    await Promise.all([alice.close(), reader.close()]);
  }
}
