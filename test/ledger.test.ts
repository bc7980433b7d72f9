// The in-process ledger (ledger.ts) through the demo's own tools: a charge over the limit is
// declined with an error result that carries the ledger's count of declines, so a stored decline,
// replayed to a keyed retry, reads apart from a fresh one. The other ledgers are tested beside
// their stores (Redis, SQLite, Postgres) and on the provider's wire (test/demo/payment-provider/provider-wire.test.ts).

import { randomUUID } from 'node:crypto';
import { MemoryIdempotencyStore } from 'mcp-request-idempotency';
import { callTool } from 'mcp-request-idempotency/client';
import { afterEach, describe, expect, it } from 'vitest';
import { CHARGE_LIMIT, ChargeDeclined, declineMessage, MemoryLedger } from '../ledger.js';
import { connectInProcess, type InProcessConnection } from './support/in-process.js';
import { textOf } from './support/sep-cases.js';

const OVER = CHARGE_LIMIT + 1;

const connections: InProcessConnection[] = [];
afterEach(async () => {
  await Promise.all(connections.splice(0).map((connection) => connection.close()));
});

async function demo(): Promise<InProcessConnection> {
  const connection = await connectInProcess({ store: new MemoryIdempotencyStore() });
  connections.push(connection);
  return connection;
}

describe('MemoryLedger', () => {
  it('declines a charge over the limit, numbering each decline, and commits nothing', async () => {
    const ledger = new MemoryLedger();
    await ledger.charge(100);

    await expect(ledger.charge(OVER)).rejects.toThrow(new ChargeDeclined(OVER, CHARGE_LIMIT, 1));
    await expect(ledger.charge(OVER)).rejects.toThrow(declineMessage(OVER, CHARGE_LIMIT, 2));
    expect(await ledger.balance()).toBe(100);
    // The limit itself is an ordinary charge; a refund is never declined.
    expect(await ledger.charge(CHARGE_LIMIT)).toBe(CHARGE_LIMIT + 100);
    expect(await ledger.refund(OVER)).toBe(CHARGE_LIMIT + 100 - OVER);

    await ledger.reset();
    await expect(ledger.charge(OVER)).rejects.toThrow(declineMessage(OVER, CHARGE_LIMIT, 1));
  });
});

describe('a declined charge through the demo tools', () => {
  it('replays the stored decline, its number included, to a keyed retry instead of declining again', async () => {
    const { client, decisions } = await demo();
    const call = { name: 'charge_guarded', arguments: { amount: OVER }, idempotencyKey: randomUUID() };

    const first = await callTool(client, call);
    const retry = await callTool(client, call);

    expect(first).toMatchObject({
      isError: true,
      content: [{ type: 'text', text: declineMessage(OVER, CHARGE_LIMIT, 1) }],
    });
    expect(retry).toEqual(first);
    expect(decisions.map((d) => d.decision)).toEqual(['executed', 'replayed']);
  });

  it('declines a call without a key again, with the next number, and charges nothing', async () => {
    const { client, ledger } = await demo();
    const call = { name: 'charge_unguarded', arguments: { amount: OVER } };

    const texts = [textOf(await callTool(client, call)), textOf(await callTool(client, call))];

    expect(texts).toEqual([declineMessage(OVER, CHARGE_LIMIT, 1), declineMessage(OVER, CHARGE_LIMIT, 2)]);
    expect(await ledger.balance()).toBe(0);
  });

  it('says in both charge tools’ descriptions what is declined', async () => {
    const { client } = await demo();
    const { tools } = await client.listTools();
    const charges = tools.filter((tool) => tool.name.startsWith('charge_'));

    expect(charges.map((tool) => tool.name).sort()).toEqual(['charge_guarded', 'charge_unguarded']);
    for (const tool of charges) expect(tool.description).toContain(`declines an amount over ${CHARGE_LIMIT}`);
  });
});
