// --- A holder killed mid-charge, its retry on another instance: what scenarios 16 and 19 show ---
//
// The balance lives beside the records (Postgres, a SQLite file) and a keyed charge commits with
// its record, so a process killed between its write and its commit leaves neither; and the claim
// names its holder (a database session, a process), so the retry on another instance takes the
// key at once instead of waiting out the lease.

import { randomUUID } from 'node:crypto';
import type { CallToolResult, Client } from '@modelcontextprotocol/client';
import { callTool, type KeyedToolCall } from 'mcp-request-idempotency/client';
import { balanceOf, resetLedger } from '../processes/launch.js';
import { errorFrom, expect, say, textOf } from './narration.js';
import { SLOW_CHARGE_MS, sleep } from './timings.js';

/**
 * charge_guarded(100) on `a`, killed (`kill`) halfway through its charge; the same call on `b`
 * must execute at once, and the ledger show one charge. Answers the call, and what `b` answered.
 */
export async function killedMidCharge(
  scenario: string,
  a: { client: Client; kill(): Promise<void> },
  b: Client,
): Promise<{ call: KeyedToolCall; answer: CallToolResult }> {
  await resetLedger(b);
  const call = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
  const lost = errorFrom(callTool(a.client, call));
  await sleep(SLOW_CHARGE_MS / 2); // A has written the charge, and not committed it
  await a.kill();
  await lost;
  const killedAt = performance.now();
  const answer = await callTool(b, call);
  const waited = Math.round(performance.now() - killedAt - SLOW_CHARGE_MS);
  say(
    `  A SIGKILLed mid-charge; the retry on B: "${textOf(answer)}", after ${waited} ms beyond its own charge`,
  );
  expect(
    scenario,
    "B took the dead holder's key at once (not after the lease) and executed",
    textOf(answer) === 'Charged 100. New balance: 100' && waited < 1_000,
    `${waited} ms`,
  );
  const balance = await balanceOf(b);
  expect(
    scenario,
    "the ledger shows one charge: A's write was rolled back with its record",
    balance === 100,
    `balance ${balance}`,
  );
  return { call, answer };
}
