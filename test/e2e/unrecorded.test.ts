// Answers that do not say what happened are never recorded. SEP-3182 replays whatever an
// execution answered, errors included; but an answer that is the store's failure, or the
// request's own cancellation reaching a tool that honours it, is not the operation's outcome.
// Recorded, it would be replayed for the whole retention though the operation never ran, or ran
// and committed; left unrecorded, the retry with the same key executes, once.

import { randomUUID } from 'node:crypto';
import { Client, InMemoryTransport } from '@modelcontextprotocol/client';
import { McpServer } from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import {
  type DecisionEvent,
  IdempotencyErrorType,
  type IdempotencyStore,
  idempotencyErrorOf,
  MemoryIdempotencyStore,
  providerKey,
} from 'mcp-request-idempotency';
import { callTool, MODERN_PROTOCOL_VERSION } from 'mcp-request-idempotency/client';
import { PostgresIdempotencyStore, postgresTransaction } from 'mcp-request-idempotency/postgres';
import { installIdempotencyGuard } from 'mcp-request-idempotency/sdk-v2';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { POSTGRES_SKIP_REASON, uniqueTablePrefix } from '../../demo/processes/postgres-server.js';
import { postgresForFile } from '../support/backends.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

type Tool = (args: { amount: number }, signal: AbortSignal) => Promise<string>;

/** A guarded server with one tool, `charge`, and an SDK client of the current line, in process. */
async function connect(store: IdempotencyStore, charge: Tool) {
  const decisions: DecisionEvent[] = [];
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  const served = serveStdio(
    () => {
      const mcp = new McpServer({ name: 'unrecorded', version: '0' });
      mcp.registerTool('charge', { inputSchema: z.object({ amount: z.number() }) }, async (args, ctx) => ({
        content: [{ type: 'text', text: await charge(args, ctx.mcpReq.signal) }],
      }));
      installIdempotencyGuard(mcp, { store, onDecision: (event) => decisions.push(event) });
      return mcp;
    },
    { transport: serverSide },
  );
  const client = new Client(
    { name: 'unrecorded-test', version: '0' },
    { versionNegotiation: { mode: { pin: MODERN_PROTOCOL_VERSION } } },
  );
  await client.connect(clientSide);
  closers.push(async () => {
    await client.close();
    await served.close();
  });
  return { client, decisions };
}

const textOf = (result: unknown) => {
  const content: unknown =
    typeof result === 'object' && result !== null ? Reflect.get(result, 'content') : undefined;
  const [first]: unknown[] = Array.isArray(content) ? content : [];
  return typeof first === 'object' && first !== null ? Reflect.get(first, 'text') : undefined;
};

describe('a tool that honours the cancellation of its request', () => {
  it('leaves a call cancelled mid-charge unrecorded: the retry executes, and the provider key makes it one charge', async () => {
    // The payment provider: it commits a charge under its idempotency key at once, and replays it
    // for the same key; its answer takes 500 ms, which the tool waits for with the request's signal.
    const charges = new Map<string, string>();
    const charge: Tool = async ({ amount }, signal) => {
      const key = providerKey('charge');
      const id = charges.get(key) ?? `ch_${charges.size + 1}`;
      charges.set(key, id);
      await new Promise<void>((resolve, reject) => {
        const answered = setTimeout(resolve, 500);
        signal.addEventListener('abort', () => {
          clearTimeout(answered);
          reject(new Error('Connection closed'));
        });
      });
      return `Charged ${amount} as ${id}`;
    };
    const { client, decisions } = await connect(new MemoryIdempotencyStore(), charge);
    const call = { name: 'charge', arguments: { amount: 100 }, idempotencyKey: randomUUID() };

    // The client gives up at 100 ms: the SDK sends notifications/cancelled, and the server aborts.
    await expect(callTool(client, call, { timeout: 100 })).rejects.toThrow(/timed out/i);
    await expect.poll(() => decisions.map((event) => event.decision)).toEqual(['unrecorded']);

    const retry = await callTool(client, call);
    expect(textOf(retry)).toBe('Charged 100 as ch_1');
    expect(charges.size).toBe(1);
    expect(await callTool(client, call)).toEqual(retry);
  });

  it('still records a call that answered in full though its request was cancelled', async () => {
    let executions = 0;
    const charge: Tool = async ({ amount }) => {
      executions += 1;
      await new Promise((resolve) => setTimeout(resolve, 300));
      return `Charged ${amount}`;
    };
    const { client, decisions } = await connect(new MemoryIdempotencyStore(), charge);
    const call = { name: 'charge', arguments: { amount: 100 }, idempotencyKey: randomUUID() };

    await expect(callTool(client, call, { timeout: 50 })).rejects.toThrow(/timed out/i);
    await expect.poll(() => decisions.map((event) => event.decision)).toEqual(['executed']);
    expect(textOf(await callTool(client, call))).toBe('Charged 100');
    expect(executions).toBe(1);
  });
});

const postgres = await postgresForFile();

describe.skipIf(!postgres)('a transactional tool that cannot get its transaction', () => {
  it('answers that the store is unavailable and records nothing: the retry, with the store back, executes once', async () => {
    if (!postgres) throw new Error(POSTGRES_SKIP_REASON);
    const prefix = uniqueTablePrefix('unrecorded');
    const payments = `${prefix}payments`;
    await postgres.admin.query(`CREATE TABLE ${payments} (amount integer NOT NULL)`);
    // Two connections, and a short wait for one, so a test can take them all.
    const store = await PostgresIdempotencyStore.connect(postgres.url, {
      tablePrefix: prefix,
      maxConnections: 2,
      statementTimeoutMs: 500,
    });
    closers.push(() => store.close());
    let poolTaken: () => void = () => {};
    let gate: Promise<void> | undefined = new Promise<void>((resolve) => {
      poolTaken = resolve;
    });
    let toolStarted: () => void = () => {};
    const started = new Promise<void>((resolve) => {
      toolStarted = resolve;
    });
    const charge: Tool = async ({ amount }) => {
      toolStarted();
      await gate;
      const tx = await postgresTransaction();
      if (!tx) throw new Error('no transaction: the store keeps its records elsewhere');
      await tx.query(`INSERT INTO ${payments} (amount) VALUES ($1)`, [amount]);
      return `Charged ${amount}`;
    };
    const { client } = await connect(store, charge);
    const call = { name: 'charge', arguments: { amount: 100 }, idempotencyKey: randomUUID() };

    // Busy slow payments hold every pooled connection while this call asks for its transaction.
    const first = callTool(client, call).catch((error: unknown) => error);
    await started;
    const held = await Promise.all([store.pool.connect(), store.pool.connect()]);
    poolTaken();
    expect(idempotencyErrorOf(await first)).toEqual({
      code: -32603,
      type: IdempotencyErrorType.storeUnavailable,
      idempotencyKey: call.idempotencyKey,
    });
    for (const connection of held) connection.release();
    gate = undefined;

    // The claim is released once the store answers again (it could not be while the pool was
    // taken): until then the retry meets it in progress, as a client retrying with backoff would.
    const retried = async () => {
      for (const started = performance.now(); performance.now() - started < 10_000; ) {
        const answer = await callTool(client, call).catch((error: unknown) => error);
        // In progress until the release lands; unavailable while a busy machine holds the store up.
        const type = idempotencyErrorOf(answer)?.type;
        if (type !== IdempotencyErrorType.inProgress && type !== IdempotencyErrorType.storeUnavailable)
          return answer;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      throw new Error('still in progress after 10 s');
    };
    expect(textOf(await retried())).toBe('Charged 100');
    expect(textOf(await callTool(client, call))).toBe('Charged 100');
    const { rows } = await postgres.admin.query(`SELECT amount FROM ${payments}`);
    expect(rows).toEqual([{ amount: 100 }]);
  });
});
