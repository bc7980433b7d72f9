// The execution context the guard hands a tool: the provider key it derives from the MCP call,
// seen from the provider's side (the keys a ledger is handed), in process.

import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import {
  createToolCallGuard,
  currentExecution,
  DEFAULT_PROVIDER_KEY_RETENTION_MS,
  MemoryIdempotencyStore,
  providerKey,
  ToolExecution,
} from 'mcp-request-idempotency';
import { callTool } from 'mcp-request-idempotency/client';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CHARGE_LIMIT,
  type ChargeOptions,
  declineOverLimit,
  type Ledger,
  type RefundOptions,
} from '../../../ledger.js';
import {
  connectInProcess,
  type InProcessConnection,
  type InProcessOptions,
  ManualClock,
} from '../../support/in-process.js';
import { textOf } from '../../support/sep-cases.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/**
 * A provider that commits every call and remembers the key each came with; like every ledger
 * here, it declines a charge over the limit, numbering each decline.
 */
class KeyRecordingLedger implements Ledger {
  readonly keys: Array<string | undefined> = [];
  declines = 0;
  private total = 0;
  async charge(amount: number, { idempotencyKey }: ChargeOptions = {}): Promise<number> {
    await declineOverLimit(amount, async () => ++this.declines);
    this.keys.push(idempotencyKey);
    this.total += amount;
    return this.total;
  }
  refund(amount: number, options: RefundOptions = {}): Promise<number> {
    return this.charge(-amount, options);
  }
  async balance(): Promise<number> {
    return this.total;
  }
  async reset(): Promise<void> {
    this.total = 0;
  }
}

const open: InProcessConnection[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((c) => c.close()));
});

/** A server with a store of its own: a fresh process, as far as records go. */
async function server(ledger: Ledger, options: Partial<InProcessOptions> = {}): Promise<InProcessConnection> {
  const connection = await connectInProcess({ store: new MemoryIdempotencyStore(), ledger, ...options });
  open.push(connection);
  return connection;
}

const keyed = (idempotencyKey: string, name = 'charge_guarded', amount = 100) => ({
  name,
  arguments: { amount },
  idempotencyKey,
});

describe('the provider key of a keyed call', () => {
  it('is the same when the record executes again on a server that lost it', async () => {
    const ledger = new KeyRecordingLedger();
    const key = randomUUID();
    await callTool((await server(ledger)).client, keyed(key));
    // Another instance, or this one restarted with an empty memory store: the call runs again.
    await callTool((await server(ledger)).client, keyed(key));
    expect(ledger.keys).toHaveLength(2);
    expect(ledger.keys[0]).toMatch(/^mcp_[A-Za-z0-9_-]{43}$/);
    expect(ledger.keys[1]).toBe(ledger.keys[0]);
  });

  it('is the same in another process: nothing of this process enters it', async () => {
    const ledger = new KeyRecordingLedger();
    const key = randomUUID();
    await callTool((await server(ledger, { scope: 'principal:alice' })).client, keyed(key));
    const script = `import { ToolExecution } from './packages/idempotency/core/execution.ts';
process.stdout.write(new ToolExecution('principal:alice', 'charge_guarded', ${JSON.stringify(key)}).providerKey('charge'));`;
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', script],
      {
        cwd: ROOT,
        timeout: 20_000,
      },
    );
    expect(stdout).toBe(ledger.keys[0]);
  });

  it('differs between two callers who chose the same MCP key', async () => {
    const ledger = new KeyRecordingLedger();
    const key = randomUUID();
    const alice = await server(ledger, { scope: 'principal:alice' });
    const bob = await server(ledger, { scope: 'principal:bob' });
    await callTool(alice.client, keyed(key));
    await callTool(bob.client, keyed(key));
    expect(ledger.keys[0]).not.toBe(ledger.keys[1]);
  });

  it('differs between tools called with the same MCP key (each on a server of its own, where no record conflicts)', async () => {
    const ledger = new KeyRecordingLedger();
    const key = randomUUID();
    await callTool((await server(ledger)).client, keyed(key, 'charge_guarded'));
    await callTool((await server(ledger)).client, keyed(key, 'charge_unguarded'));
    expect(new Set(ledger.keys).size).toBe(2);
  });

  it('is not the client key, nor contains it', async () => {
    const ledger = new KeyRecordingLedger();
    const key = 'order-4711';
    await callTool((await server(ledger)).client, keyed(key));
    expect(ledger.keys[0]).not.toContain(key);
  });

  it('is never sent for a replay: the provider is not called at all', async () => {
    const ledger = new KeyRecordingLedger();
    const { client } = await server(ledger);
    const key = randomUUID();
    const first = await callTool(client, keyed(key));
    const retry = await callTool(client, keyed(key));
    expect(retry).toEqual(first);
    expect(ledger.keys).toHaveLength(1);
  });
});

describe('the provider key of a call without an MCP key', () => {
  it('is fresh for every execution', async () => {
    const ledger = new KeyRecordingLedger();
    const { client } = await server(ledger);
    const call = { name: 'charge_unguarded', arguments: { amount: 100 } };
    expect(textOf(await callTool(client, call))).toBe('Charged 100. New balance: 100');
    expect(textOf(await callTool(client, call))).toBe('Charged 100. New balance: 200');
    expect(ledger.keys.every((key) => key?.startsWith('mcp_'))).toBe(true);
    expect(ledger.keys[0]).not.toBe(ledger.keys[1]);
  });

  it('is the same for every provider call of one execution, so its own retries reuse it', () => {
    const execution = new ToolExecution('local', 'charge_unguarded');
    expect(execution.providerKey('charge')).toBe(execution.providerKey('charge'));
    expect(execution.providerKey('charge')).not.toBe(execution.providerKey('refund'));
    expect(new ToolExecution('local', 'charge_unguarded').providerKey('charge')).not.toBe(
      execution.providerKey('charge'),
    );
  });

  it('differs between processes, each one’s first execution alike: a restarted server never reuses one', async () => {
    const script = `import { ToolExecution } from './packages/idempotency/core/execution.ts';
process.stdout.write(new ToolExecution('local', 'charge_unguarded').providerKey('charge'));`;
    const firstOfAProcess = async () => {
      const run = promisify(execFile)(
        process.execPath,
        ['--import', 'tsx', '--input-type=module', '-e', script],
        {
          cwd: ROOT,
          timeout: 20_000,
        },
      );
      return (await run).stdout;
    };
    const keys = await Promise.all([firstOfAProcess(), firstOfAProcess()]);
    expect(keys.every((key) => /^mcp_[\w-]{43}$/.test(key))).toBe(true);
    expect(keys[0]).not.toBe(keys[1]);
    expect(keys).not.toContain(new ToolExecution('local', 'charge_unguarded').providerKey('charge'));
  });

  it('is fresh outside any guarded call', () => {
    expect(providerKey('charge')).toMatch(/^mcp_/);
    expect(providerKey('charge')).not.toBe(providerKey('charge'));
  });
});

describe('a tool whose outcome is unknown', () => {
  /** A provider that never answers whether it committed: it commits, then the answer is lost. */
  class AnswerLostLedger extends KeyRecordingLedger {
    override async charge(amount: number, options: ChargeOptions = {}): Promise<number> {
      await super.charge(amount, options);
      currentExecution()?.markOutcomeUnknown('ECONNRESET');
      throw new Error('the provider did not answer');
    }
  }

  it('is recorded as nothing: the retry executes again, with the same provider key', async () => {
    const ledger = new AnswerLostLedger();
    const { client, decisions } = await server(ledger);
    const key = randomUUID();
    const first = await callTool(client, keyed(key));
    expect(first.isError).toBe(true);
    const retry = await callTool(client, keyed(key));
    expect(retry.isError).toBe(true);
    expect(ledger.keys).toHaveLength(2);
    expect(ledger.keys[1]).toBe(ledger.keys[0]);
    expect(decisions.map((d) => d.decision)).toEqual(['unrecorded', 'unrecorded']);
    expect(decisions[0]?.message).toContain('ECONNRESET');
  });

  it('leaves a tool error that says so recorded and replayed, like any other', async () => {
    const ledger = new KeyRecordingLedger();
    const { client } = await server(ledger);
    const key = randomUUID();
    const declined = { ...keyed(key), arguments: { amount: CHARGE_LIMIT + 1 } };
    const first = await callTool(client, declined);
    expect(first.isError).toBe(true);
    expect(textOf(first)).toMatch(/\(decline 1\)$/);
    // A second decline would say "decline 2": the retry got the stored one.
    expect(await callTool(client, declined)).toEqual(first);
    expect(ledger.declines).toBe(1);
    expect(ledger.keys).toHaveLength(0);
  });
});

/**
 * A payment provider that keeps each idempotency key for `keyRetentionMs` and replays its answer
 * to the same key (Stripe keeps keys 24 h), on the test's clock.
 */
class ReplayingProvider extends KeyRecordingLedger {
  private readonly answers = new Map<string, { balance: number; until: number }>();
  /** Calls made; `charges` counts those that charged, the rest were replays of a known key. */
  calls = 0;
  charges = 0;
  constructor(
    private readonly clock: ManualClock,
    readonly providerKeyRetentionMs = DEFAULT_PROVIDER_KEY_RETENTION_MS,
  ) {
    super();
  }
  override async charge(amount: number, options: ChargeOptions = {}): Promise<number> {
    this.calls += 1;
    const key = options.idempotencyKey;
    const known = key === undefined ? undefined : this.answers.get(key);
    if (known && known.until > this.clock.now()) return known.balance;
    this.charges += 1;
    const balance = await super.charge(amount, options);
    if (key !== undefined)
      this.answers.set(key, { balance, until: this.clock.now() + this.providerKeyRetentionMs });
    return balance;
  }
}

describe('a key reused once its record is gone', () => {
  const HOUR_MS = 60 * 60 * 1000;

  it('is replayed by the guard for as long as the provider keeps the provider key, by default', async () => {
    const clock = new ManualClock();
    const provider = new ReplayingProvider(clock);
    const { client } = await server(provider, { store: new MemoryIdempotencyStore({ now: clock.now }) });
    const key = randomUUID();
    const first = await callTool(client, keyed(key));

    clock.advance(23 * HOUR_MS);
    expect(await callTool(client, keyed(key))).toEqual(first);
    // Replayed by the guard: the provider was not asked again.
    expect(provider.calls).toBe(1);

    // Both have forgotten: the reused key is a new operation, and the provider charges it.
    clock.advance(HOUR_MS + 1);
    expect(textOf(await callTool(client, keyed(key)))).toBe('Charged 100. New balance: 200');
    expect(provider.charges).toBe(2);
  });

  it('is refused as a configuration: a guard that would forget its records before the provider forgets its keys does not start', async () => {
    const store = new MemoryIdempotencyStore();
    expect(() => createToolCallGuard({ store, retentionMs: 200 })).toThrow(
      /retentionMs \(200\) is shorter than providerKeyRetentionMs \(86400000\)/,
    );
    expect(() => createToolCallGuard({ store, retentionMs: 999, providerKeyRetentionMs: 1_000 })).toThrow(
      RangeError,
    );
    // The demo's server takes its provider's retention from the ledger.
    await expect(
      server(new ReplayingProvider(new ManualClock()), { store, retentionMs: 200 }).then((c) =>
        callTool(c.client, keyed(randomUUID())),
      ),
    ).rejects.toThrow();
    expect(() => createToolCallGuard({ store, retentionMs: 200, providerKeyRetentionMs: 200 })).not.toThrow();
    expect(() => createToolCallGuard({ store, retentionMs: 200, providerKeyRetentionMs: 0 })).not.toThrow();
  });

  it('reaches a provider that has forgotten the old operation when the guard is told the provider’s retention', async () => {
    const clock = new ManualClock();
    const provider = new ReplayingProvider(clock, 1_000);
    const { client } = await server(provider, {
      store: new MemoryIdempotencyStore({ now: clock.now }),
      retentionMs: 1_000,
    });
    const key = randomUUID();
    expect(textOf(await callTool(client, keyed(key)))).toBe('Charged 100. New balance: 100');
    clock.advance(1_001);
    expect(textOf(await callTool(client, keyed(key)))).toBe('Charged 100. New balance: 200');
    expect(provider.charges).toBe(2);
  });
});
