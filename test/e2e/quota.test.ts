// A quota per caller: the SEP's "Servers SHOULD apply rate limits and quotas to the records".
// One caller past its own quota is refused with its own error, nothing executed; every other
// caller's keys go on as before. Here over HTTP, through the server; what every store answers is
// the store contract's (test/idempotency/stores/contract.test.ts), the memory store's global caps its own file's.

import { randomUUID } from 'node:crypto';
import { IdempotencyErrorType, INTERNAL_ERROR, idempotencyErrorOf } from 'mcp-request-idempotency';
import { afterAll, describe, expect, it } from 'vitest';
import { jsonRpcText } from '../support/hostile.js';
import { type HttpInstance, startHttpInstance } from '../support/http.js';

const closers: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const close of closers.splice(0)) await close();
});

const QUOTA = 3;

describe('a quota per caller, over HTTP', () => {
  let server: HttpInstance;
  const call = (token: string, params: Record<string, unknown>) =>
    fetch(server.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        authorization: `Bearer ${token}`,
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params }),
    }).then(async (response) => JSON.parse(await jsonRpcText(response)));
  const charge = (amount: number) => ({
    name: 'charge_guarded',
    arguments: { amount },
    idempotencyKey: randomUUID(),
  });

  it('refuses alice’s keyed charge past her quota with its own error, charging nothing, while bob charges and replays', async () => {
    server = await startHttpInstance(['--max-records', '100', '--max-records-per-caller', String(QUOTA)], {
      DEMO_BEARER_TOKENS: 'alice:token-a,bob:token-b',
    });
    closers.push(() => server.stop());
    for (let i = 0; i < QUOTA; i++) expect((await call('token-a', charge(1))).result).toBeDefined();
    const refused = await call('token-a', charge(1));
    expect(idempotencyErrorOf(refused.error)).toMatchObject({
      code: INTERNAL_ERROR,
      type: IdempotencyErrorType.quotaExceeded,
    });
    const balance = await call('token-a', { name: 'get_balance', arguments: {} });
    expect(balance.result.structuredContent.balance).toBe(QUOTA);
    const bobs = charge(7);
    const first = await call('token-b', bobs);
    expect(first.result.structuredContent).toStrictEqual({ charged: 7, balance: QUOTA + 7 });
    expect(await call('token-b', bobs)).toStrictEqual(first);
    const logged = (await server.decisions()).filter((d) => d.decision === 'quotaExceeded');
    expect(logged.map((d) => d.scope)).toStrictEqual(['principal:alice']);
  });
});
