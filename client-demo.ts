// --- The scripted client: each SEP-3182 scenario, narrated and checked ---
//
// Speaks the 2026-07-28 protocol (server/discover, a per-request envelope) unless a scenario
// says otherwise. Spawns server.ts over stdio (an instant provider, and a slow one for the
// scenarios that need a charge still running) and over stateless HTTP, runs the scenarios, and
// ends with a table of every expectation. It exits non-zero if any failed, so CI runs it as an
// end-to-end assertion. What every scenario uses, the narration, the table, the timings and the
// rule for a backend that cannot start, is in scenarios/.

import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import type { CallToolResult } from '@modelcontextprotocol/client';
import { Client as V1Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as V1StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { CallToolResultSchema as V1CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import {
  DEFAULT_LEASE_MS,
  IdempotencyErrorType,
  INVALID_PARAMS,
  idempotencyErrorOf,
} from 'mcp-request-idempotency';
import {
  type Attempt,
  advertisesIdempotency,
  callTool,
  callToolIdempotently,
  discoverCapabilities,
  IdempotentClient,
  type KeyedToolCall,
} from 'mcp-request-idempotency/client';
import {
  balanceOf,
  connectHttpClient,
  connectToServer,
  type HttpInstance,
  postModern,
  resetLedger,
  type ServerConnection,
  startHttpInstance,
} from './processes/launch.js';
import { startPostgres } from './processes/postgres.js';
import {
  type Commit,
  PROVIDER_IMPLEMENTATIONS,
  type ProviderProcess,
  startProviderProcess,
} from './processes/provider.js';
import { startRedis } from './processes/redis.js';
import {
  backendFor,
  DEMO_REDIS_PREFIX,
  everyScenarioMustRun,
  POSTGRES_ABSENT,
  REDIS_ABSENT,
} from './scenarios/backends.js';
import {
  errorFrom,
  everyExpectationHeld,
  expect,
  heading,
  printTable,
  say,
  sayAttempt,
  textOf,
} from './scenarios/narration.js';
import { IMPATIENT_RETRIES, IMPATIENT_TIMEOUT_MS, SLOW_CHARGE_MS, sleep } from './scenarios/timings.js';

/** When the broken-stream scenario cuts the connection: the charge is under way by then. */
const BREAK_AFTER_MS = 200;

// --- The scenarios ---

async function discovery(server: ServerConnection): Promise<void> {
  const s = '0 discovery';
  heading('Scenario 0: discovery', 'A client that depends on deduplication checks server/discover first.');
  say(`  server/discover, the answer as the transport received it: ${JSON.stringify(server.discovery)}`);
  say(
    `  the capabilities, after the SDK client parsed them: ${JSON.stringify(server.client.getServerCapabilities())}`,
  );
  expect(
    s,
    'server/discover advertises capabilities.tools.idempotency',
    advertisesIdempotency(server.rawCapabilities),
    JSON.stringify(server.rawCapabilities),
  );
}

async function noKeyDoubleCharges({ client }: ServerConnection): Promise<void> {
  const s = '1 no key';
  heading(
    'Scenario 1: no idempotency key',
    'charge_unguarded(100) commits, the response is lost, the client retries.',
  );
  await resetLedger(client);
  const first = await callTool(client, { name: 'charge_unguarded', arguments: { amount: 100 } });
  say(`  attempt 1: ${textOf(first)}   <- pretend this response never arrived`);
  const retry = await callTool(client, { name: 'charge_unguarded', arguments: { amount: 100 } });
  say(`  retry:     ${textOf(retry)}`);
  const balance = await balanceOf(client);
  expect(s, 'the retry charges the customer a second time', balance === 200, `balance ${balance}`);
}

async function keyedRetryReplays({ client }: ServerConnection): Promise<string> {
  const s = '2 keyed retry';
  heading('Scenario 2: the same retry with an idempotencyKey', 'charge_guarded(100) twice, one key.');
  await resetLedger(client);
  const idempotencyKey = randomUUID();
  const call = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey };
  const first = await callTool(client, call);
  say(`  attempt 1 (key ${idempotencyKey}): ${textOf(first)}   <- pretend this response never arrived`);
  const retry = await callTool(client, call);
  say(`  retry, same key:   ${textOf(retry)}`);
  const balance = await balanceOf(client);
  expect(s, 'charged once', balance === 100, `balance ${balance}`);
  expect(
    s,
    "the retry's response is identical to the original",
    isDeepStrictEqual(first, retry),
    JSON.stringify(retry.structuredContent),
  );
  return idempotencyKey;
}

async function conflictRejected({ client }: ServerConnection, idempotencyKey: string): Promise<void> {
  const s = '3 conflict';
  heading(
    'Scenario 3: the same key with other arguments',
    'charge_guarded(999) reusing the key of scenario 2.',
  );
  const error = await errorFrom(
    callTool(client, { name: 'charge_guarded', arguments: { amount: 999 }, idempotencyKey }),
  );
  const sep = idempotencyErrorOf(error);
  say(`  answer: ${error instanceof Error ? error.message : 'no error'}`);
  say(`  data:   ${JSON.stringify(sep)}`);
  expect(
    s,
    'rejected with the conflict error',
    sep?.code === INVALID_PARAMS &&
      sep.type === IdempotencyErrorType.conflict &&
      sep.idempotencyKey === idempotencyKey,
    `code ${sep?.code}, type ${sep?.type}`,
  );
  const balance = await balanceOf(client);
  expect(s, 'nothing executed: balance unchanged', balance === 100, `balance ${balance}`);
}

async function noKeyStillWorks({ client }: ServerConnection): Promise<void> {
  const s = '4 backward compatible';
  heading(
    'Scenario 4: calls without a key behave exactly as today',
    'charge_guarded(50) twice, no key: the guard steps aside.',
  );
  await resetLedger(client);
  const first = await callTool(client, { name: 'charge_guarded', arguments: { amount: 50 } });
  const second = await callTool(client, { name: 'charge_guarded', arguments: { amount: 50 } });
  say(`  ${textOf(first)}`);
  say(`  ${textOf(second)}`);
  const balance = await balanceOf(client);
  expect(
    s,
    'every unkeyed call executes',
    balance === 100 && textOf(second) === 'Charged 50. New balance: 100',
    `balance ${balance}`,
  );
}

async function duplicateInFlight({ client }: ServerConnection): Promise<void> {
  const s = '5 in flight';
  heading(
    'Scenario 5: a duplicate arrives while the original still runs',
    `The provider takes ${SLOW_CHARGE_MS} ms; the duplicate follows 100 ms later.`,
  );
  await resetLedger(client);
  const call = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
  const original = callTool(client, call);
  await new Promise((resolve) => setTimeout(resolve, 100));
  const sent = performance.now();
  const error = await errorFrom(callTool(client, call));
  const waitedMs = Math.round(performance.now() - sent);
  const sep = idempotencyErrorOf(error);
  say(`  duplicate answered after ${waitedMs} ms: ${error instanceof Error ? error.message : 'no error'}`);
  expect(
    s,
    'the duplicate gets the in-progress error',
    sep?.code === INVALID_PARAMS &&
      sep.type === IdempotencyErrorType.inProgress &&
      sep.idempotencyKey === call.idempotencyKey,
    `type ${sep?.type}`,
  );
  expect(s, 'at once, without waiting for the original', waitedMs < SLOW_CHARGE_MS / 2, `${waitedMs} ms`);
  say(`  original: ${textOf(await original)}`);
  const balance = await balanceOf(client);
  expect(s, 'the original completes, once', balance === 100, `balance ${balance}`);
}

async function realLostResponse({ client }: ServerConnection): Promise<void> {
  const s = '6 lost response';
  heading(
    'Scenario 6: a real lost response',
    `The client gives up after ${IMPATIENT_TIMEOUT_MS} ms on a ${SLOW_CHARGE_MS} ms charge, then retries with the same key.`,
  );
  await resetLedger(client);
  const { result, attempts, idempotencyKey } = await callToolIdempotently(
    client,
    { name: 'charge_guarded', arguments: { amount: 100 } },
    { policy: IMPATIENT_RETRIES, onAttempt: sayAttempt },
  );
  say(`  final answer: ${textOf(result)}`);
  const outcomes = attempts.map((a) => a.outcome);
  expect(
    s,
    'the first attempt timed out (the response was lost)',
    outcomes[0] === 'timedOut',
    outcomes.join(' → '),
  );
  expect(
    s,
    'a retry while the charge still ran got in progress',
    outcomes.includes('inProgress'),
    outcomes.join(' → '),
  );
  expect(
    s,
    'every attempt carried the same key',
    attempts.every((a) => a.idempotencyKey === idempotencyKey),
    idempotencyKey,
  );
  expect(
    s,
    'the last retry got the stored response',
    textOf(result) === 'Charged 100. New balance: 100',
    textOf(result),
  );
  const balance = await balanceOf(client);
  expect(s, 'get_balance shows one charge', balance === 100, `balance ${balance}`);
}

async function brokenStreamReissued(instance: HttpInstance): Promise<void> {
  const s = '7 broken stream';
  heading(
    'Scenario 7: a broken response stream, re-issued with a new request id',
    `2026-07-28: "clients MUST re-issue it as a new request with a new request ID". Raw HTTP; the stream of a ${SLOW_CHARGE_MS} ms charge breaks at ${BREAK_AFTER_MS} ms.`,
  );
  const client = await connectHttpClient(instance.url);
  try {
    await resetLedger(client);
    const params = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
    const cut = new AbortController();
    const first = postModern(instance.url, { id: 1, method: 'tools/call', params }, cut.signal);
    await sleep(BREAK_AFTER_MS);
    cut.abort();
    const broke = await first.then(
      () => false,
      () => true,
    );
    say(`  request id 1: stream broken, ${broke ? 'no answer' : 'answered?'}`);
    const outcomes: string[] = [];
    let answer: unknown;
    for (let id = 2; id < 40 && answer === undefined; id++) {
      const message: unknown = await (
        await postModern(instance.url, { id, method: 'tools/call', params })
      ).json();
      const sep = idempotencyErrorOf(Reflect.get(Object(message), 'error'));
      outcomes.push(sep?.type === IdempotencyErrorType.inProgress ? 'inProgress' : 'answered');
      say(`  request id ${id}, same key: ${outcomes.at(-1)}`);
      if (sep?.type === IdempotencyErrorType.inProgress) await sleep(150);
      else answer = Reflect.get(Object(message), 'result');
    }
    expect(s, 'the broken request got no answer', broke, broke ? 'aborted' : 'answered');
    expect(
      s,
      'a re-issue while the charge still ran got in progress',
      outcomes[0] === 'inProgress',
      outcomes.join(' → '),
    );
    const text = JSON.stringify(Reflect.get(Object(answer), 'structuredContent'));
    expect(s, 'a later re-issue got the stored response', text === '{"charged":100,"balance":100}', text);
    const decisions = instance.decisions().filter((d) => d.idempotencyKey === params.idempotencyKey);
    expect(
      s,
      'the charge executed once, under the first request',
      decisions.filter((d) => d.decision === 'executed').length === 1,
      decisions.map((d) => d.decision).join(', '),
    );
    const balance = await balanceOf(client);
    expect(s, 'one charge', balance === 100, `balance ${balance}`);
  } finally {
    await client.close();
  }
}

async function v1ClientSameDeduplication(): Promise<void> {
  const s = '8 v1 SDK client';
  heading(
    'Scenario 8: a client on the v1 SDK, protocol 2025-11-25',
    '@modelcontextprotocol/sdk 1.32: initialize, then charge_guarded(100) twice with one key, against the same server.',
  );
  const transport = new V1StdioClientTransport({
    command: process.execPath,
    args: ['--import', 'tsx', join(import.meta.dirname, 'server.ts')],
    cwd: import.meta.dirname,
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

// --- Scale-out: two stateless HTTP instances sharing one Redis ---

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

function keyedDecisions(instance: HttpInstance, idempotencyKey: string): string[] {
  return instance
    .decisions()
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
    const onA = keyedDecisions(a, idempotencyKey);
    const onB = keyedDecisions(b, idempotencyKey);
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

async function runStdioScenarios(): Promise<void> {
  const fast = await connectToServer();
  const slow = await connectToServer(['--charge-latency-ms', String(SLOW_CHARGE_MS)]);
  try {
    await discovery(fast);
    await noKeyDoubleCharges(fast);
    const key = await keyedRetryReplays(fast);
    await conflictRejected(fast, key);
    await noKeyStillWorks(fast);
    await duplicateInFlight(slow);
    await realLostResponse(slow);
  } finally {
    await fast.close();
    await slow.close();
  }
}

async function runHttpScenario(): Promise<void> {
  const instance = await startHttpInstance(['--charge-latency-ms', String(SLOW_CHARGE_MS)]);
  try {
    await brokenStreamReissued(instance);
  } finally {
    await instance.stop();
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

async function refundAsksFirst(): Promise<void> {
  const s = '12 multi-round refund';
  heading(
    "Scenario 12: a refund that asks first, and the confirming round's response is lost",
    `refund_order answers input_required (a question); the SDK client asks the user and sends the continuation by itself. The refund takes ${SLOW_CHARGE_MS} ms, the client gives up after ${IMPATIENT_TIMEOUT_MS} ms per round, then retries with the same key.`,
  );
  const questions: string[] = [];
  const server = await connectToServer(['--charge-latency-ms', String(SLOW_CHARGE_MS)], {
    askUser: async ({ message }) => {
      questions.push(message);
      say(`  the user is asked: "${message}" and says yes`);
      return { action: 'accept', content: { confirm: true } };
    },
  });
  try {
    await resetLedger(server.client);
    const { result, attempts } = await callToolIdempotently(
      server.client,
      { name: 'refund_order', arguments: { orderId: 'A-1001', amount: 4200 } },
      { policy: IMPATIENT_RETRIES, onAttempt: sayAttempt },
    );
    say(`  final answer: ${textOf(result)}`);
    const outcomes = attempts.map((a) => a.outcome);
    say(
      '  A guard that recorded input_required as the final answer would have answered the continuation with',
    );
    say('  the question again: the SDK client asks the user every round, up to its cap of 10, then gives up');
    say('  (INPUT_REQUIRED_ROUNDS_EXCEEDED), and nothing is ever refunded.');
    expect(
      s,
      "the confirming round's response was lost: attempt 1 timed out",
      outcomes[0] === 'timedOut',
      outcomes.join(' → '),
    );
    expect(s, 'the user was asked once', questions.length === 1, `${questions.length} question(s)`);
    expect(
      s,
      'the retry got the stored refund',
      textOf(result) === 'Refunded 4200 to order A-1001. New balance: -4200',
      textOf(result),
    );
    const balance = await balanceOf(server.client);
    expect(s, 'one refund on the ledger', balance === -4200, `balance ${balance}`);
    const decided = server.decisions().map((d) => String(d.decision));
    say(`  the guard decided: ${decided.join(', ')}`);
    expect(
      s,
      'the opening round awaited input, and the confirming round executed once',
      decided[0] === 'awaitingInput' && decided.filter((d) => d === 'executed').length === 1,
      decided.join(', '),
    );
  } finally {
    await server.close();
  }
}

/**
 * Scenarios 9 to 11 need a Redis both instances share: a private redis-server on loopback when
 * one is installed (as the tests start), else the one at REDIS_URL.
 */
async function runScaleOutScenarios(required: boolean): Promise<void> {
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

async function clientOwnsItsRetries(): Promise<void> {
  const s = '13 client-owned retries';
  heading(
    'Scenario 13: a client that owns its keys and its retries',
    `The call site names the tool and its arguments, nothing else. IdempotentClient keys the call, gives up after ${IMPATIENT_TIMEOUT_MS} ms on a ${SLOW_CHARGE_MS} ms charge, and retries with the same key. Stateless HTTP.`,
  );
  const instance = await startHttpInstance(['--charge-latency-ms', String(SLOW_CHARGE_MS)]);
  const client = await connectHttpClient(instance.url);
  const attempts: Attempt[] = [];
  const shop = new IdempotentClient(client, await discoverCapabilities(client), {
    ...IMPATIENT_RETRIES,
    onAttempt: (a) => {
      attempts.push(a);
      sayAttempt(a);
    },
  });
  try {
    await resetLedger(client);
    const result = await shop.callTool('charge_guarded', { amount: 100 });
    say(`  final answer: ${textOf(result)}`);
    const outcomes = attempts.map((a) => a.outcome);
    expect(
      s,
      'the first attempt timed out (the response was lost)',
      outcomes[0] === 'timedOut',
      outcomes.join(' → '),
    );
    const keys = new Set(attempts.map((a) => a.idempotencyKey));
    expect(
      s,
      'every attempt carried the one key the wrapper generated',
      attempts.length > 1 && keys.size === 1,
      [...keys].join(', '),
    );
    const decided = instance
      .decisions()
      .filter((d) => keys.has(String(d.idempotencyKey)))
      .map((d) => String(d.decision));
    say(`  the server decided: ${decided.join(', ')}`);
    expect(
      s,
      'the server executed the charge once',
      decided.filter((d) => d === 'executed').length === 1,
      decided.join(', '),
    );
    const balance = await shop.callTool('get_balance');
    const charged = Reflect.get(Object(balance.structuredContent), 'balance');
    expect(s, 'get_balance shows one charge', charged === 100, `balance ${charged}`);
    const readsKeyed = instance.decisions().some((d) => d.tool === 'get_balance');
    expect(s, 'get_balance, read-only, went without a key', !readsKeyed, readsKeyed ? 'keyed' : 'no key');
  } finally {
    await shop.close();
    await instance.stop();
  }
}

// --- The other hop: the server's call to the payment provider ---
//
// provider/provider.ts, a payment API in a process of its own that takes an Idempotency-Key, stands in
// for Stripe. Each window is shown twice: with `--provider-keys none` (the server sends no key:
// the provider that takes no keys, where the window is open) and with the key the guard derives
// from the MCP call (closed).

type ProviderKeys = 'none' | 'derived';
const PROVIDER_KEY_CHOICES: ProviderKeys[] = ['none', 'derived'];

function describeCommits(commits: Commit[]): string {
  const keys = commits.map((c) => (c.idempotencyKey ? `${c.idempotencyKey.slice(0, 12)}…` : 'no key'));
  return `${commits.length} commit(s): ${keys.join(', ')}`;
}

async function providerAnswerLost(provider: ProviderProcess): Promise<void> {
  const s = '14 provider answer lost';
  heading(
    "Scenario 14: the provider's answer is lost after it committed",
    'charge_guarded(100): the provider commits, then resets the socket before answering. The server retries its own request; only the provider key makes that retry safe. The MCP client never notices either way.',
  );
  for (const keys of PROVIDER_KEY_CHOICES) {
    const server = await connectToServer(['--provider-url', provider.url, '--provider-keys', keys]);
    try {
      await provider.reset();
      await provider.queueFault({ path: '/charges', fault: 'drop-after-commit' });
      const call = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
      const answer = textOf(await callTool(server.client, call));
      const commits = await provider.commits();
      say(
        `  --provider-keys ${keys}: the MCP client got "${answer}"; the provider: ${describeCommits(commits)}`,
      );
      if (keys === 'none')
        expect(
          s,
          "no provider key: the server's own retry charged again (two charges)",
          commits.length === 2,
          describeCommits(commits),
        );
      else {
        expect(s, 'the provider key carried: one charge', commits.length === 1, describeCommits(commits));
        expect(
          s,
          'the client got the answer it would have got',
          answer === 'Charged 100. New balance: 100',
          answer,
        );
      }
    } finally {
      await server.close();
    }
  }
  const server = await connectToServer(['--provider-url', provider.url]);
  try {
    await provider.reset();
    await provider.queueFault({ path: '/charges', fault: 'drop-after-commit' });
    const answer = textOf(
      await callTool(server.client, { name: 'charge_unguarded', arguments: { amount: 100 } }),
    );
    const commits = await provider.commits();
    say(`  a call without an MCP key: "${answer}"; the provider: ${describeCommits(commits)}`);
    expect(
      s,
      'without an MCP key too: one charge (the execution has a provider key of its own)',
      commits.length === 1,
      describeCommits(commits),
    );
  } finally {
    await server.close();
  }
}

/** Where a keyed call starts, and where its retry goes once the first server is killed. */
interface KillAndRetry {
  label: string;
  call(call: KeyedToolCall): Promise<CallToolResult>;
  kill(): Promise<void>;
  retry(call: KeyedToolCall): Promise<CallToolResult>;
  close(): Promise<void>;
}

async function stdioRespawned(args: string[]): Promise<KillAndRetry> {
  const first = await connectToServer(args);
  const later: ServerConnection[] = [];
  return {
    label: 'stdio, the server respawned',
    call: (call) => callTool(first.client, call),
    kill: () => first.kill(),
    retry: async (call) => {
      const fresh = await connectToServer(args);
      later.push(fresh);
      return callTool(fresh.client, call);
    },
    close: async () => void (await Promise.allSettled([first.close(), ...later.map((c) => c.close())])),
  };
}

/** The lease a killed instance's claim holds its key for, short in the demo (the default is 120 s). */
const DEMO_LEASE_MS = 1_000;

async function httpOnRedis(args: string[], redisUrl: string): Promise<KillAndRetry> {
  const shared = ['--store', 'redis', '--redis-url', redisUrl, '--redis-prefix', DEMO_REDIS_PREFIX];
  const options = [...shared, '--in-progress-lease-ms', String(DEMO_LEASE_MS), ...args];
  const [a, b] = await Promise.all([startHttpInstance(options), startHttpInstance(options)]);
  const [viaA, viaB] = await Promise.all([connectHttpClient(a.url), connectHttpClient(b.url)]);
  return {
    label: `HTTP, the retry on instance B (Redis; lease ${DEMO_LEASE_MS} ms)`,
    call: (call) => callTool(viaA, call),
    kill: () => a.kill(),
    // B answers in progress until A's claim runs out its lease: A is dead, and nothing says so.
    retry: async (call) => {
      for (let attempt = 1; ; attempt += 1) {
        const error = await errorFrom(callTool(viaB, call));
        if (idempotencyErrorOf(error)?.type !== IdempotencyErrorType.inProgress || attempt === 50)
          return callTool(viaB, call);
        await sleep(100);
      }
    },
    close: async () => {
      await Promise.allSettled([viaA.close(), viaB.close()]);
      await Promise.allSettled([a.stop(), b.stop()]);
    },
  };
}

async function serverKilledMidAnswer(provider: ProviderProcess, redisUrl: string | undefined): Promise<void> {
  const s = '15 server killed';
  heading(
    "Scenario 15: the server is killed while the provider's committed answer is on its way",
    "The provider commits charge_guarded(100) and holds its answer; the server is SIGKILLed. Its record was never written, so the retry, same MCP key, executes again on a fresh server: the SEP's one stated limit, closed by the provider key.",
  );
  const setups = [(args: string[]) => stdioRespawned(args)];
  if (redisUrl) setups.push((args) => httpOnRedis(args, redisUrl));
  else say("  (the HTTP half is skipped: it needs Redis, for instance B to share A's records)");
  for (const setup of setups)
    for (const keys of PROVIDER_KEY_CHOICES) {
      await provider.reset();
      const where = await setup(['--provider-url', provider.url, '--provider-keys', keys]);
      try {
        await provider.queueFault({ path: '/charges', fault: 'hold-after-commit' });
        const call = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
        const lost = errorFrom(where.call(call));
        while ((await provider.held()) === 0) await sleep(20);
        await where.kill();
        await lost;
        await provider.release();
        const answer = textOf(await where.retry(call));
        const commits = await provider.commits();
        say(
          `  ${where.label}, --provider-keys ${keys}: the retry got "${answer}"; the provider: ${describeCommits(commits)}`,
        );
        if (keys === 'none')
          expect(
            s,
            `${where.label}, no provider key: charged twice`,
            commits.length === 2,
            describeCommits(commits),
          );
        else
          expect(
            s,
            `${where.label}, the provider key carried: one charge, and the answer it would have got`,
            commits.length === 1 && answer === 'Charged 100. New balance: 100',
            `${describeCommits(commits)}; "${answer}"`,
          );
      } finally {
        await where.close();
      }
    }
}

/** Scenarios 14 and 15: the project's provider, and Redis for the HTTP half when there is one. */
async function runProviderScenarios(): Promise<void> {
  const provider = await startProviderProcess(PROVIDER_IMPLEMENTATIONS[0]?.command ?? []);
  const redis = await backendFor("Scenario 15's HTTP half (on Redis)", startRedis, REDIS_ABSENT);
  try {
    await providerAnswerLost(provider);
    await serverKilledMidAnswer(provider, redis?.url);
  } finally {
    await provider.stop();
    await redis?.flush(DEMO_REDIS_PREFIX);
    await redis?.stop();
  }
}

// --- Postgres: the records in the database the tool writes ---
//
// Two stateless HTTP instances on one Postgres, the balance a table beside the records. A keyed
// charge writes through its record's transaction, so the charge and its record commit together
// or not at all; and a claim names the database session of the instance holding it, so when that
// instance dies its key is free at once, not after the two-minute lease.

const DEMO_POSTGRES_PREFIX = 'sep3182_demo_';

async function postgresScenarios(postgresUrl: string): Promise<void> {
  const s = '16 Postgres';
  heading(
    'Scenario 16: two instances on one Postgres; A killed mid-charge',
    `The balance is a table in the same database; a keyed charge commits with its record. Default lease (${DEFAULT_LEASE_MS / 1000} s). Each charge takes ${SLOW_CHARGE_MS} ms between its write and its commit.`,
  );
  const args = [
    '--store',
    'postgres',
    '--postgres-url',
    postgresUrl,
    '--postgres-prefix',
    DEMO_POSTGRES_PREFIX,
  ];
  const [a, b] = await Promise.all([
    startHttpInstance([...args, '--charge-latency-ms', String(SLOW_CHARGE_MS)]),
    startHttpInstance([...args, '--charge-latency-ms', String(SLOW_CHARGE_MS)]),
  ]);
  const [viaA, viaB] = await Promise.all([connectHttpClient(a.url), connectHttpClient(b.url)]);
  try {
    await resetLedger(viaA);
    const replayed = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
    const first = await callTool(viaA, replayed);
    const retry = await callTool(viaB, replayed);
    say(`  on A: "${textOf(first)}"; the same key on B: "${textOf(retry)}"`);
    expect(s, "a retry on B replays A's record", isDeepStrictEqual(first, retry), textOf(retry));

    await resetLedger(viaA);
    const killed = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
    const lost = errorFrom(callTool(viaA, killed));
    await sleep(SLOW_CHARGE_MS / 2); // A has written the charge, and not committed it
    await a.kill();
    await lost;
    const killedAt = performance.now();
    const answer = await callTool(viaB, killed);
    const waited = Math.round(performance.now() - killedAt - SLOW_CHARGE_MS);
    say(
      `  A SIGKILLed mid-charge; the retry on B: "${textOf(answer)}", after ${waited} ms beyond its own charge`,
    );
    expect(
      s,
      "B took the dead holder's key at once (not after the lease) and executed",
      textOf(answer) === 'Charged 100. New balance: 100' && waited < 1_000,
      `${waited} ms`,
    );
    const balance = await balanceOf(viaB);
    expect(
      s,
      "the ledger shows one charge: A's write was rolled back with its record",
      balance === 100,
      `balance ${balance}`,
    );
  } finally {
    await Promise.allSettled([viaA.close(), viaB.close()]);
    await Promise.allSettled([a.stop(), b.stop()]);
  }
}

/** Scenario 16 needs Postgres: a private cluster when its server binaries are installed, else DATABASE_URL. */
async function runPostgresScenarios(): Promise<void> {
  const postgres = await backendFor('Scenario 16 (Postgres)', startPostgres, POSTGRES_ABSENT);
  if (!postgres) return;
  try {
    await postgresScenarios(postgres.url);
  } finally {
    await postgres.drop(DEMO_POSTGRES_PREFIX);
    await postgres.stop();
  }
}

async function main(): Promise<void> {
  const scaleOnly = process.argv.includes('--scale');
  say('SEP-3182 request idempotency: the TypeScript demo, on the 2026-07-28 protocol');
  if (!scaleOnly) {
    await runStdioScenarios();
    await runHttpScenario();
    await v1ClientSameDeduplication();
  }
  // `--scale` runs the Redis scenarios and nothing else: without Redis it has nothing to show.
  await runScaleOutScenarios(scaleOnly || everyScenarioMustRun());
  if (!scaleOnly) await refundAsksFirst();
  if (!scaleOnly) await clientOwnsItsRetries();
  if (!scaleOnly) await runProviderScenarios();
  await runPostgresScenarios();
  printTable();
  process.exitCode = everyExpectationHeld() ? 0 : 1;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    process.stderr.write(
      `demo failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exit(1);
  });
}
