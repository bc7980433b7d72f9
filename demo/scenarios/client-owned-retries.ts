// --- Scenario 13: a client that owns its keys and its retries ---
//
// IdempotentClient keys every call that may change something, keeps the key across its own
// retries, and leaves read-only calls unkeyed: the call site names a tool and its arguments only.

import { type Attempt, discoverCapabilities, IdempotentClient } from 'mcp-request-idempotency/client';
import { connectHttpClient, resetLedger, startHttpInstance } from '../processes/launch.js';
import { expect, heading, say, sayAttempt, textOf } from './narration.js';
import { IMPATIENT_RETRIES, IMPATIENT_TIMEOUT_MS, SLOW_CHARGE_MS } from './timings.js';

export async function clientOwnsItsRetries(): Promise<void> {
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
    const decided = (await instance.decisions())
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
    const readsKeyed = (await instance.decisions()).some((d) => d.tool === 'get_balance');
    expect(s, 'get_balance, read-only, went without a key', !readsKeyed, readsKeyed ? 'keyed' : 'no key');
  } finally {
    await shop.close();
    await instance.stop();
  }
}
