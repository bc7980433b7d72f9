// The guard in process, where the test owns the clock, the store and the caller's scope.

import { randomUUID } from 'node:crypto';
import { McpServer as McpServerV1 } from '@modelcontextprotocol/sdk/server/mcp.js';
import { McpServer as McpServerV2 } from '@modelcontextprotocol/server';
import {
  type Claim,
  createToolCallGuard,
  IdempotencyErrorType,
  type IdempotencyStore,
  INTERNAL_ERROR,
  idempotencyErrorOf,
  MAX_RETENTION_MS,
  MemoryIdempotencyStore,
} from 'mcp-request-idempotency';
import { callTool } from 'mcp-request-idempotency/client';
import * as v1 from 'mcp-request-idempotency/sdk-v1';
import * as v2 from 'mcp-request-idempotency/sdk-v2';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { balanceOf } from '../../../demo/processes/launch.js';
import { MemoryLedger } from '../../../ledger.js';
import { connectInProcess, type InProcessConnection, ManualClock } from '../../support/in-process.js';
import { errorFrom, textOf } from '../../support/sep-cases.js';
import { neverRenewing } from '../../support/store-fixtures.js';

const RETENTION_MS = 300_000;
const open: InProcessConnection[] = [];

async function connect(options: Parameters<typeof connectInProcess>[0]): Promise<InProcessConnection> {
  const connection = await connectInProcess(options);
  open.push(connection);
  return connection;
}

afterEach(async () => {
  await Promise.all(open.splice(0).map((c) => c.close()));
});

const charge = (amount: number, idempotencyKey: string = randomUUID()) => ({
  name: 'charge_guarded',
  arguments: { amount },
  idempotencyKey,
});

describe('retention', () => {
  it('replays within the retention window, then evicts the record and executes the key again', async () => {
    const clock = new ManualClock();
    const store = new MemoryIdempotencyStore({ now: clock.now });
    const { client } = await connect({ store, retentionMs: RETENTION_MS });
    const call = charge(100);

    await callTool(client, call);
    clock.advance(RETENTION_MS - 1);
    await callTool(client, call);
    expect(await balanceOf(client)).toBe(100);

    clock.advance(1);
    const again = await callTool(client, call);
    expect(textOf(again)).toBe('Charged 100. New balance: 200');
    expect(store.size).toBe(1);
  });

  it('evicts expired records from memory on the next keyed call, not merely ignores them', async () => {
    const clock = new ManualClock();
    const store = new MemoryIdempotencyStore({ now: clock.now });
    const { client } = await connect({ store, retentionMs: RETENTION_MS });
    for (let i = 0; i < 50; i++) await callTool(client, charge(1));
    expect(store.size).toBe(50);
    clock.advance(RETENTION_MS);
    await callTool(client, charge(1));
    expect(store.size).toBe(1);
  });

  it.each([
    ['retentionMs', Number.MAX_SAFE_INTEGER],
    ['leaseMs', MAX_RETENTION_MS + 1],
    ['awaitingInputRetentionMs', Number.POSITIVE_INFINITY],
  ])('refuses a %s of %d, longer than every store keeps a record, when the guard is made', (name, ms) => {
    const store = new MemoryIdempotencyStore();
    expect(() => createToolCallGuard({ store, [name]: ms })).toThrow(
      new RangeError(`${name} must be a positive number of ms up to ${MAX_RETENTION_MS}, got ${ms}`),
    );
  });
});

describe('a lease shorter than the call', () => {
  it('lets a retry execute again once the lease runs out, and logs the first call as unrecorded', async () => {
    const clock = new ManualClock();
    const store = new MemoryIdempotencyStore({ now: clock.now });
    const { client, decisions } = await connect({ store, ledger: new MemoryLedger(150), leaseMs: 1_000 });
    const call = charge(100);

    const first = callTool(client, call);
    await new Promise((resolve) => setTimeout(resolve, 30));
    clock.advance(1_000);
    const second = callTool(client, call);
    await Promise.all([first, second]);

    // At least once, as the SEP allows across a lost claim: the operator sees why in the log.
    expect(await balanceOf(client)).toBe(200);
    expect(decisions.map((d) => [d.decision, d.message])).toStrictEqual([
      [
        'unrecorded',
        'the call outlived its in-progress lease and the key was claimed again; its response was not recorded',
      ],
      ['executed', undefined],
    ]);
  });
});

describe('the record cap', () => {
  it('refuses a new key when every record is live, and executes nothing', async () => {
    const store = new MemoryIdempotencyStore({ maxRecords: 3, now: new ManualClock().now });
    const { client } = await connect({ store });
    for (let i = 0; i < 3; i++) await callTool(client, charge(1));
    const error = await errorFrom(callTool(client, charge(1)));
    expect(idempotencyErrorOf(error)).toMatchObject({
      code: INTERNAL_ERROR,
      type: IdempotencyErrorType.storeFull,
    });
    expect(await balanceOf(client)).toBe(3);
  });

  it('still replays the live records it holds while full', async () => {
    const store = new MemoryIdempotencyStore({ maxRecords: 1, now: new ManualClock().now });
    const { client } = await connect({ store });
    const call = charge(5);
    const first = await callTool(client, call);
    expect(await callTool(client, call)).toStrictEqual(first);
  });

  it('drops expired records first, then accepts the new key', async () => {
    const clock = new ManualClock();
    const store = new MemoryIdempotencyStore({ maxRecords: 2, now: clock.now });
    const { client } = await connect({ store, retentionMs: RETENTION_MS });
    await callTool(client, charge(1));
    await callTool(client, charge(1));
    clock.advance(RETENTION_MS);
    await callTool(client, charge(1));
    expect(await balanceOf(client)).toBe(3);
  });
});

describe('scope: the caller’s authorization boundary', () => {
  it('never replays one caller’s result to another caller using the same key', async () => {
    const store = new MemoryIdempotencyStore();
    const ledger = new MemoryLedger();
    const alice = await connect({ store, ledger, scope: 'alice' });
    const bob = await connect({ store, ledger, scope: 'bob' });
    const key = 'shared-key';

    const aliceFirst = await callTool(alice.client, charge(100, key));
    const bobFirst = await callTool(bob.client, charge(100, key));
    expect(textOf(aliceFirst)).toBe('Charged 100. New balance: 100');
    expect(textOf(bobFirst)).toBe('Charged 100. New balance: 200');
    expect(await callTool(alice.client, charge(100, key))).toStrictEqual(aliceFirst);
    expect(await callTool(bob.client, charge(100, key))).toStrictEqual(bobFirst);
    expect(await ledger.balance()).toBe(200);
  });

  it('never answers one caller with a conflict from another caller’s record', async () => {
    const store = new MemoryIdempotencyStore();
    const alice = await connect({ store, scope: 'alice' });
    const bob = await connect({ store, scope: 'bob' });
    await callTool(alice.client, charge(100, 'k'));
    const bobs = await callTool(bob.client, charge(999, 'k'));
    expect(textOf(bobs)).toBe('Charged 999. New balance: 999');
  });
});

describe('a call that outlives its lease', () => {
  // Real time here: the lease is renewed by a timer while the call runs.
  const LEASE_MS = 300;
  const CHARGE_MS = 3 * LEASE_MS;

  async function duplicateDuringLongCharge(store: IdempotencyStore) {
    const ledger = new MemoryLedger(CHARGE_MS);
    const { client } = await connect({ store, ledger, leaseMs: LEASE_MS });
    const call = charge(100);
    const original = callTool(client, call);
    await new Promise((resolve) => setTimeout(resolve, 2 * LEASE_MS + 100));
    const duplicate = await errorFrom(callTool(client, call)).catch(() => undefined);
    await original;
    return { duplicate, balance: await ledger.balance(), retry: await callTool(client, call) };
  }

  it('keeps its claim while it runs: a duplicate after two leases is in progress, and it executes once', async () => {
    const { duplicate, balance, retry } = await duplicateDuringLongCharge(new MemoryIdempotencyStore());
    expect(idempotencyErrorOf(duplicate)?.type).toBe(IdempotencyErrorType.inProgress);
    expect(balance).toBe(100);
    expect(textOf(retry)).toBe('Charged 100. New balance: 100');
  });

  it('would lose it without renewal: the same duplicate then executes a second time', async () => {
    // The control: a store that never extends a lease, as before renewal existed.
    const neverRenews = neverRenewing(new MemoryIdempotencyStore(), true);
    const ledger = new MemoryLedger(CHARGE_MS);
    const { client } = await connect({ store: neverRenews, ledger, leaseMs: LEASE_MS });
    const call = charge(100);
    const original = callTool(client, call);
    await new Promise((resolve) => setTimeout(resolve, 2 * LEASE_MS + 100));
    const duplicate = callTool(client, call);
    await Promise.all([original, duplicate]);
    expect(await ledger.balance()).toBe(200);
  });
});

describe('a store that cannot be reached', () => {
  const unreachable: IdempotencyStore = {
    claim: () => Promise.reject(new Error('ECONNREFUSED')),
    complete: () => Promise.reject(new Error('ECONNREFUSED')),
    awaitInput: () => Promise.reject(new Error('ECONNREFUSED')),
    release: () => Promise.reject(new Error('ECONNREFUSED')),
    renew: () => Promise.reject(new Error('ECONNREFUSED')),
    clear: () => Promise.resolve(),
  };

  it('fails the keyed call closed: a clear error and no charge', async () => {
    const { client, decisions } = await connect({ store: unreachable });
    const error = await errorFrom(callTool(client, charge(100)));
    expect(idempotencyErrorOf(error)).toMatchObject({
      code: INTERNAL_ERROR,
      type: IdempotencyErrorType.storeUnavailable,
    });
    expect(await balanceOf(client)).toBe(0);
    expect(decisions.map((d) => d.decision)).toStrictEqual(['storeUnavailable']);
  });

  it('still serves calls without a key', async () => {
    const { client } = await connect({ store: unreachable });
    await callTool(client, { name: 'charge_unguarded', arguments: { amount: 1 } });
    expect(await balanceOf(client)).toBe(1);
  });

  it('answers the caller even when only the record write fails, and says so in the log', async () => {
    const claimsOnly: IdempotencyStore = {
      claim: (id, fingerprint): Promise<Claim> =>
        Promise.resolve({ state: 'claimed', ticket: { ...id, fingerprint, token: 't' } }),
      complete: () => Promise.reject(new Error('connection reset')),
      awaitInput: () => Promise.reject(new Error('connection reset')),
      release: () => Promise.reject(new Error('connection reset')),
      renew: () => Promise.reject(new Error('connection reset')),
      clear: () => Promise.resolve(),
    };
    const { client, decisions } = await connect({ store: claimsOnly });
    expect(textOf(await callTool(client, charge(100)))).toBe('Charged 100. New balance: 100');
    expect(decisions.map((d) => d.decision)).toStrictEqual(['unrecorded']);
  });
});

// Each SDK line's adapter, installed on a server of its own line: one with no tools yet, and
// one whose SDK (as if changed) no longer keeps its handlers where the guard reaches for them.
const options = () => ({ store: new MemoryIdempotencyStore() });
const withoutHandlerMap = <S extends { server: object }>(server: S): S => {
  Reflect.set(server.server, '_requestHandlers', undefined);
  return server;
};
const adapters = [
  {
    line: 'v2 (@modelcontextprotocol/server)',
    verifyGuardSeesKeys: v2.verifyGuardSeesKeys,
    installOnBare: () => v2.installIdempotencyGuard(new McpServerV2({ name: 't', version: '0' }), options()),
    installOnChangedSdk: () => {
      const server = new McpServerV2({ name: 't', version: '0' });
      server.registerTool('t', { inputSchema: z.object({}) }, () => ({ content: [] }));
      v2.installIdempotencyGuard(withoutHandlerMap(server), options());
    },
  },
  {
    line: 'v1 (@modelcontextprotocol/sdk)',
    verifyGuardSeesKeys: v1.verifyGuardSeesKeys,
    installOnBare: () => v1.installIdempotencyGuard(new McpServerV1({ name: 't', version: '0' }), options()),
    installOnChangedSdk: () => {
      const server = new McpServerV1({ name: 't', version: '0' });
      server.registerTool('t', { inputSchema: {} }, () => ({ content: [] }));
      v1.installIdempotencyGuard(withoutHandlerMap(server), options());
    },
  },
];

describe.each(adapters)('installing the guard with the $line adapter', (adapter) => {
  it('refuses to install before any tool exists, rather than guard nothing', () => {
    expect(adapter.installOnBare).toThrow(/register tools before installing the guard/);
  });

  it('refuses to install when the SDK no longer keeps its handlers where the guard expects', () => {
    expect(adapter.installOnChangedSdk).toThrow(/refusing to start without deduplication/);
  });

  it('passes the start-up self-check with this SDK', async () => {
    await expect(adapter.verifyGuardSeesKeys()).resolves.toBeUndefined();
  });

  it('fails the start-up self-check loudly when keys stop reaching the guard', async () => {
    await expect(adapter.verifyGuardSeesKeys(() => {})).rejects.toThrow(
      /executed 2 times.*refusing to start/,
    );
  });
});
