// --- The scripted client: each SEP-3182 scenario, narrated and checked ---
//
// Spawns server.ts over stdio (twice: an instant provider, and a slow one for the scenarios
// that need a charge still running), runs the scenarios, and ends with a table of every
// expectation. It exits non-zero if any failed, so CI runs it as an end-to-end assertion.

import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { getDefaultEnvironment, StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import {
  advertisesIdempotency,
  callTool,
  callToolIdempotently,
  captureServerCapabilities,
  IdempotencyErrorType,
  INVALID_PARAMS,
  idempotencyErrorOf,
} from './idempotency/index.js';

const HERE = dirname(fileURLToPath(import.meta.url));

/** A charge slow enough to overlap a duplicate, or to outlast a client's patience. */
const SLOW_CHARGE_MS = 800;
/** The demo client's per-request timeout in the lost-response scenario: well under the charge. */
const IMPATIENT_TIMEOUT_MS = 250;

export interface ServerConnection {
  client: Client;
  /** `capabilities` from the initialize result, as it arrived on the wire. */
  rawCapabilities: unknown;
  /** The server's stderr, one line per element (its decision log). */
  stderrLines: string[];
  close(): Promise<void>;
}

/** Spawns `server.ts` with `args` and connects an SDK client to it over stdio. */
export async function connectToServer(args: string[] = []): Promise<ServerConnection> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: ['--import', 'tsx', join(HERE, 'server.ts'), ...args],
    cwd: HERE,
    env: getDefaultEnvironment(),
    stderr: 'pipe',
  });
  const stderrLines: string[] = [];
  let partial = '';
  transport.stderr?.on('data', (chunk: Buffer) => {
    const lines = (partial + chunk.toString('utf8')).split('\n');
    partial = lines.pop() ?? '';
    stderrLines.push(...lines);
  });
  const capabilities = captureServerCapabilities(transport);
  const client = new Client({ name: 'sep-3182-client-demo', version: '0.1.0' });
  await client.connect(transport);
  return { client, rawCapabilities: await capabilities, stderrLines, close: () => client.close() };
}

// --- Small helpers the scenarios share ---

export async function balanceOf(client: Client): Promise<number> {
  const result = await callTool(client, { name: 'get_balance', arguments: {} });
  const balance = result.structuredContent?.balance;
  if (typeof balance !== 'number')
    throw new Error(`get_balance returned no balance: ${JSON.stringify(result)}`);
  return balance;
}

export async function resetLedger(client: Client): Promise<void> {
  await callTool(client, { name: 'reset_ledger', arguments: {} });
}

function textOf(result: CallToolResult): string {
  return result.content.map((part) => (part.type === 'text' ? part.text : `[${part.type}]`)).join(' ');
}

/** Runs `call` and returns what it threw (or undefined), for scenarios that expect an error. */
async function errorFrom(call: Promise<unknown>): Promise<unknown> {
  try {
    await call;
    return undefined;
  } catch (error) {
    return error;
  }
}

// --- Narration and the expectation table ---

interface Expectation {
  scenario: string;
  expectation: string;
  passed: boolean;
  observed: string;
}

const expectations: Expectation[] = [];

function expect(scenario: string, expectation: string, passed: boolean, observed: string): void {
  expectations.push({ scenario, expectation, passed, observed });
  say(`  ${passed ? '✓' : '✗'} ${expectation} (${observed})`);
}

function say(line = ''): void {
  process.stdout.write(`${line}\n`);
}

function heading(title: string, why: string): void {
  say();
  say(`== ${title}`);
  say(`   ${why}`);
}

// --- The scenarios ---

async function discovery(server: ServerConnection): Promise<void> {
  const s = '0 discovery';
  heading('Scenario 0: discovery', 'A client that depends on deduplication checks the capability first.');
  say(`  initialize result, capabilities as sent: ${JSON.stringify(server.rawCapabilities)}`);
  say(`  the same, after the SDK client parsed it: ${JSON.stringify(server.client.getServerCapabilities())}`);
  expect(
    s,
    'the server advertises capabilities.tools.idempotency',
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
  const idempotencyKey = crypto.randomUUID();
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
  const call = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: crypto.randomUUID() };
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
    {
      policy: { timeoutMs: IMPATIENT_TIMEOUT_MS, initialBackoffMs: 100, maxBackoffMs: 300, maxAttempts: 30 },
      onAttempt: (a) => say(`  attempt ${a.attempt} at ${Math.round(a.elapsedMs)} ms: ${a.outcome}`),
    },
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

function printTable(): void {
  say();
  say('== Expectations');
  const width = Math.max(...expectations.map((e) => e.scenario.length));
  for (const e of expectations)
    say(`  ${e.passed ? '✓' : '✗'}  ${e.scenario.padEnd(width)}  ${e.expectation}`);
  const failed = expectations.filter((e) => !e.passed).length;
  say();
  say(
    failed === 0
      ? `All ${expectations.length} expectations held.`
      : `${failed} of ${expectations.length} expectations FAILED.`,
  );
}

async function main(): Promise<void> {
  say('SEP-3182 request idempotency: the TypeScript demo');
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
  printTable();
  process.exitCode = expectations.every((e) => e.passed) && expectations.length > 0 ? 0 : 1;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    process.stderr.write(
      `demo failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exit(1);
  });
}
