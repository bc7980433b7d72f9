// --- The scripted client: each SEP-3182 scenario, narrated and checked ---
//
// Speaks the 2026-07-28 protocol (server/discover, a per-request envelope) unless a scenario
// says otherwise. Spawns server.ts over stdio (an instant provider, and a slow one for the
// scenarios that need a charge still running) and over stateless HTTP, runs the scenarios, and
// ends with a table of what was expected. It exits non-zero if any failed, so CI runs it as an
// end-to-end assertion.
//
// The SEP's own story is told here, top to bottom (scenarios 0 to 7): `npm run demo` runs it alone,
// on the memory store. `npm run demo:all` (`--all`) adds the further scenarios, each in a file of
// demo/scenarios/, with what they all use (the narration, the table, the timings).

import { randomUUID } from 'node:crypto';
import { constants } from 'node:os';
import { pathToFileURL } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import { IdempotencyErrorType, INVALID_PARAMS, idempotencyErrorOf } from 'mcp-request-idempotency';
import { advertisesIdempotency, callTool, callToolIdempotently } from 'mcp-request-idempotency/client';
import {
  balanceOf,
  connectHttpClient,
  connectToServer,
  type HttpInstance,
  postModern,
  resetLedger,
  type ServerConnection,
  startHttpInstance,
} from './demo/processes/launch.js';
import { clientOwnsItsRetries } from './demo/scenarios/client-owned-retries.js';
import { decisionsScraped } from './demo/scenarios/decisions-scraped.js';
import { everyScenarioMustRun } from './demo/scenarios/installed-backends.js';
import { installInteropIfNeeded, runAgentFrameworkScenario } from './demo/scenarios/interop.js';
import {
  errorFrom,
  everyExpectationHeld,
  expect,
  heading,
  printTable,
  say,
  sayAttempt,
  textOf,
} from './demo/scenarios/narration.js';
import { runProviderScenarios } from './demo/scenarios/provider-hop.js';
import { runPostgresScenarios } from './demo/scenarios/records-beside-the-balance.js';
import { refundAsksFirst } from './demo/scenarios/refund-asks-first.js';
import { runScaleOutScenarios } from './demo/scenarios/scale-out-on-redis.js';
import { runSqliteScenarios } from './demo/scenarios/stdio-on-one-file.js';
import { IMPATIENT_RETRIES, IMPATIENT_TIMEOUT_MS, SLOW_CHARGE_MS, sleep } from './demo/scenarios/timings.js';
import { v1ClientSameDeduplication } from './demo/scenarios/v1-client.js';

/** When the broken-stream scenario cuts the connection: the charge is under way by then. */
const BREAK_AFTER_MS = 200;

// --- The SEP's own scenarios ---

async function discovery(server: ServerConnection): Promise<void> {
  const s = '0 discovery';
  heading('Scenario 0: discovery', 'A client that depends on deduplication checks server/discover first.');
  const tools: unknown = Reflect.get(Object(server.rawCapabilities), 'tools');
  say(`  server/discover's capabilities.tools, as the transport received it: ${JSON.stringify(tools)}`);
  say("  (read from the wire: the SDK client's parsed capabilities leave out idempotency)");
  expect(
    s,
    'server/discover advertises capabilities.tools.idempotency',
    advertisesIdempotency(server.rawCapabilities),
    `idempotency: ${JSON.stringify(Reflect.get(Object(tools), 'idempotency'))}`,
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
  const inProgress = attempts.filter((a) => a.outcome === 'inProgress').map((a) => a.attempt);
  expect(
    s,
    'the first attempt timed out (the response was lost)',
    outcomes[0] === 'timedOut',
    `${outcomes[0]}`,
  );
  expect(
    s,
    'a retry while the charge still ran got in progress',
    inProgress.length > 0,
    `attempt ${inProgress.join(', ')}`,
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
    const broke = await first.then(() => false).catch(() => true);
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
      `request id 2: ${outcomes[0]}`,
    );
    const text = JSON.stringify(Reflect.get(Object(answer), 'structuredContent'));
    expect(s, 'a later re-issue got the stored response', text === '{"charged":100,"balance":100}', text);
    const decisions = (await instance.decisions()).filter((d) => d.idempotencyKey === params.idempotencyKey);
    say(`  the server's decisions for the key, as logged: ${decisions.map((d) => d.decision).join(', ')}`);
    say("  (each is logged as its request is answered: request 1's executed, once its charge has finished)");
    const executed = decisions.filter((d) => d.decision === 'executed').length;
    expect(s, 'the charge executed once, under the first request', executed === 1, `executed ${executed}×`);
    const balance = await balanceOf(client);
    expect(s, 'one charge', balance === 100, `balance ${balance}`);
  } finally {
    await client.close();
  }
}

// --- The run: the SEP's own scenarios by default; with --all, every further one; then the table ---

type SepServers = { fast: ServerConnection; slow: ServerConnection; http: HttpInstance };

/** The three servers the SEP's scenarios talk to, started together: the demo's wait, said aloud. */
async function startSepServers(): Promise<SepServers> {
  say(
    `Starting server.ts three times on the memory store: over stdio with an instant provider, over stdio with a ${SLOW_CHARGE_MS} ms charge, and over stateless HTTP with the same charge…`,
  );
  const began = performance.now();
  const [fast, slow, http] = await Promise.all([
    connectToServer(),
    connectToServer(['--charge-latency-ms', String(SLOW_CHARGE_MS)]),
    startHttpInstance(['--charge-latency-ms', String(SLOW_CHARGE_MS)]),
  ]);
  say(`…started in ${((performance.now() - began) / 1000).toFixed(1)} s.`);
  return { fast, slow, http };
}

async function runSepScenarios(): Promise<void> {
  const { fast, slow, http } = await startSepServers();
  try {
    await discovery(fast);
    await noKeyDoubleCharges(fast);
    const key = await keyedRetryReplays(fast);
    await conflictRejected(fast, key);
    await noKeyStillWorks(fast);
    await duplicateInFlight(slow);
    await realLostResponse(slow);
    await brokenStreamReissued(http);
  } finally {
    await Promise.all([fast.close(), slow.close(), http.stop()]);
  }
}

/** Scenarios 8 to 19: another SDK line, backends, the provider hop, the agent frameworks. */
async function runFurtherScenarios(): Promise<void> {
  await v1ClientSameDeduplication();
  await runScaleOutScenarios(everyScenarioMustRun());
  await refundAsksFirst();
  await clientOwnsItsRetries();
  await runProviderScenarios();
  await runPostgresScenarios();
  await decisionsScraped();
  await runAgentFrameworkScenario();
  await runSqliteScenarios();
}

/** The first line: the capability the tour shows, and what it promises. */
const INTRO =
  'SEP-3182 request idempotency: a server that declares capabilities.tools.idempotency runs a tools/call once per idempotencyKey, however often it is retried (2026-07-28 protocol).';

/** What each tour is about to show, said first. */
const TOURS = {
  sep: "Scenarios 0 to 7, the SEP's story: discovery, a retry without a key and with one, a conflict, a duplicate in flight, a lost response, a broken stream.",
  all: "Scenarios 0 to 19: the SEP's story, then a v1 client, Redis, Postgres and SQLite, the payment provider, agent frameworks.",
  scale: 'Scenarios 9 to 11 and 16: instances sharing their records on Redis and on Postgres.',
};

async function main(): Promise<void> {
  const tour = process.argv.includes('--scale') ? 'scale' : process.argv.includes('--all') ? 'all' : 'sep';
  say(`${INTRO}\n${TOURS[tour]}`);
  const setUp = tour === 'all' ? await installInteropIfNeeded() : undefined;
  if (tour === 'scale') {
    // Only the scenarios that need a backend; without Redis it has nothing to show.
    await runScaleOutScenarios(true);
    await runPostgresScenarios();
  } else {
    await runSepScenarios();
    if (tour === 'all') await runFurtherScenarios();
  }
  printTable(tour === 'all' ? 'one line per scenario' : 'every expectation', setUp);
  if (tour === 'sep')
    say(
      'Scenarios 8 to 19 (a v1 client, Redis, Postgres and SQLite, the payment provider, agent frameworks): npm run demo:all',
    );
  process.exitCode = everyExpectationHeld() ? 0 : 1;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  // Stopped (Ctrl-C, or a kill of `npm run demo`), it exits through 'exit', whose handlers stop
  // the servers, payment providers and Redis it started: without this, Node dies at the signal
  // and they serve on, orphaned.
  for (const signal of ['SIGTERM', 'SIGINT'] as const)
    process.once(signal, () => process.exit(128 + constants.signals[signal]));
  main().catch((error: unknown) => {
    process.stderr.write(
      `demo failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exit(1);
  });
}
