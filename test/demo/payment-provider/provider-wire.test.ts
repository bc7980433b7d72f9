// The payment provider's wire (docs/provider-wire.md), as a client of it would notice: balances,
// commit logs, status codes and the bytes of each answer. Every implementation in
// PROVIDER_IMPLEMENTATIONS runs the same tests, so the wire, not one implementation, is what they
// pin down. Each implementation gets three processes (plain, slow, forgetful), reset before every
// test.

import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startProvider } from '../../../demo/payment-provider/api.js';
import { ERROR_TYPES } from '../../../demo/payment-provider/provider-wire.js';
import { sleep, waitUntil } from '../../../demo/processes/bounds.js';
import {
  PROVIDER_IMPLEMENTATIONS,
  type ProviderProcess,
  type ProviderResult,
  startProviderProcess,
} from '../../../demo/processes/payment-provider.js';
import { CHARGE_LIMIT, declineMessage } from '../../../ledger.js';

/** The slow process's latency: long enough that a second request surely arrives mid-charge. */
const SLOW_LATENCY_MS = 1_500;
/** How long a test waits before sending the second request into that window. */
const INTO_THE_WINDOW_MS = 250;

/**
 * The process of process group `group` that listens on `port` (from Linux's /proc): the command
 * itself, or the child of a wrapper it ran.
 */
function listenerOf(group: number, port: number): number {
  const hexPort = `:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  const LISTEN = '0A';
  const sockets = new Set(
    readFileSync('/proc/net/tcp', 'utf8')
      .split('\n')
      .map((line) => line.trim().split(/\s+/))
      .filter(([, local, , state]) => local?.endsWith(hexPort) && state === LISTEN)
      .map((fields) => `socket:[${fields[9]}]`),
  );
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      // Fields after the command's closing parenthesis: state, parent, process group.
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]) !== group) continue;
      const fds = readdirSync(`/proc/${pid}/fd`);
      if (fds.some((fd) => sockets.has(readlinkSync(`/proc/${pid}/fd/${fd}`)))) return Number(pid);
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  throw new Error(`nothing in process group ${group} listens on port ${port}`);
}

/** The `error.type` of an error answer, or undefined if the body is not one. */
function errorTypeOf(result: ProviderResult): unknown {
  const { body } = result;
  if (typeof body !== 'object' || body === null || !('error' in body)) return undefined;
  const { error } = body;
  return typeof error === 'object' && error !== null && 'type' in error ? error.type : undefined;
}

/** The `id` of a success answer. */
function idOf(result: ProviderResult): unknown {
  const { body } = result;
  return typeof body === 'object' && body !== null && 'id' in body ? body.id : undefined;
}

describe.each(PROVIDER_IMPLEMENTATIONS)('the payment provider: $name', ({ command }) => {
  let provider: ProviderProcess;
  let slow: ProviderProcess;
  let forgetful: ProviderProcess;

  beforeAll(async () => {
    await Promise.all([
      startProviderProcess(command).then((started) => {
        provider = started;
      }),
      startProviderProcess(command, { latencyMs: SLOW_LATENCY_MS }).then((started) => {
        slow = started;
      }),
      startProviderProcess(command, { keyRetentionSeconds: 1 }).then((started) => {
        forgetful = started;
      }),
    ]);
  });

  afterAll(async () => {
    await Promise.all([provider?.stop(), slow?.stop(), forgetful?.stop()]);
  });

  beforeEach(async () => {
    await Promise.all([provider.reset(), slow.reset(), forgetful.reset()]);
  });

  describe('without an Idempotency-Key', () => {
    it('executes every time: two charges, two commits, a balance of 200', async () => {
      const first = await provider.charge(100);
      const second = await provider.charge(100);

      expect(first.status).toBe(200);
      expect(second.status).toBe(200);
      expect(first.body).toMatchObject({ amount: 100, balance: 100 });
      expect(second.body).toMatchObject({ amount: 100, balance: 200 });
      expect(idOf(first)).toMatch(/^ch_./);
      expect(idOf(second)).not.toBe(idOf(first));
      expect(second.headers['idempotent-replayed']).toBeUndefined();
      expect(await provider.balance()).toBe(200);
      expect(await provider.commits()).toEqual([
        { seq: 1, id: idOf(first), operation: 'charge', amount: 100, idempotencyKey: null },
        { seq: 2, id: idOf(second), operation: 'charge', amount: 100, idempotencyKey: null },
      ]);
    });
  });

  describe('a retry under the same key', () => {
    it('replays the stored status and byte-identical body, marked Idempotent-Replayed, without committing again', async () => {
      const first = await provider.charge(100, 'retry-1');
      const retry = await provider.charge(100, 'retry-1');

      expect(first.status).toBe(200);
      expect(first.headers['idempotent-replayed']).toBeUndefined();
      expect(retry.status).toBe(200);
      expect(retry.headers['idempotent-replayed']).toBe('true');
      expect(retry.raw.equals(first.raw)).toBe(true);
      expect(await provider.balance()).toBe(100);
      expect(await provider.commits()).toEqual([
        { seq: 1, id: idOf(first), operation: 'charge', amount: 100, idempotencyKey: 'retry-1' },
      ]);
    });

    it('replays the answer as it was, not recomputed: the balance in it is the one at the commit', async () => {
      const first = await provider.charge(100, 'as-it-was');
      await provider.charge(50);
      const retry = await provider.charge(100, 'as-it-was');

      expect(retry.raw.equals(first.raw)).toBe(true);
      expect(retry.body).toMatchObject({ balance: 100 });
      expect(await provider.balance()).toBe(150);
    });

    it('replays a refund the same way', async () => {
      await provider.charge(500);
      const first = await provider.refund('o-1', 200, 'refund-1');
      const retry = await provider.refund('o-1', 200, 'refund-1');

      expect(first.status).toBe(200);
      expect(idOf(first)).toMatch(/^re_./);
      expect(retry.headers['idempotent-replayed']).toBe('true');
      expect(retry.raw.equals(first.raw)).toBe(true);
      expect(await provider.balance()).toBe(300);
      expect(await provider.commits()).toHaveLength(2);
    });

    it('accepts a key of 255 characters, the longest allowed', async () => {
      const key = 'k'.repeat(255);
      const first = await provider.charge(100, key);
      const retry = await provider.charge(100, key);

      expect(first.status).toBe(200);
      expect(retry.headers['idempotent-replayed']).toBe('true');
      expect(await provider.commits()).toMatchObject([{ idempotencyKey: key }]);
    });
  });

  describe('a charge over the limit', () => {
    const over = CHARGE_LIMIT + 1;
    const declined = (decline: number) => ({
      error: {
        type: ERROR_TYPES.declined,
        message: declineMessage(over, CHARGE_LIMIT, decline),
        amount: over,
        limit: CHARGE_LIMIT,
        decline,
      },
    });

    it('is declined with 402 card_declined, numbered by the declines so far, and nothing is committed', async () => {
      const first = await provider.charge(over);
      const second = await provider.charge(over);
      const largest = await provider.charge(CHARGE_LIMIT);

      expect(first.status).toBe(402);
      expect(first.body).toEqual(declined(1));
      expect(second.body).toEqual(declined(2));
      expect(largest.status).toBe(200);
      expect(await provider.balance()).toBe(CHARGE_LIMIT);
      expect(await provider.commits()).toMatchObject([{ seq: 1, amount: CHARGE_LIMIT }]);
    });

    it('is stored under its key: a retry replays the decline, number and bytes, and is not declined again', async () => {
      const first = await provider.charge(over, 'declined-1');
      const retry = await provider.charge(over, 'declined-1');
      const fresh = await provider.charge(over);

      expect(retry.status).toBe(402);
      expect(retry.headers['idempotent-replayed']).toBe('true');
      expect(retry.raw.equals(first.raw)).toBe(true);
      expect(fresh.body).toEqual(declined(2));
      expect(await provider.commits()).toEqual([]);
    });

    it('counts from 1 again after a reset', async () => {
      await provider.charge(over);
      await provider.reset();

      expect((await provider.charge(over)).body).toEqual(declined(1));
    });
  });

  describe('the same key with another body', () => {
    it('is refused with 422 idempotency_key_mismatch, and nothing is committed', async () => {
      await provider.charge(100, 'mismatch-1');
      const other = await provider.charge(200, 'mismatch-1');

      expect(other.status).toBe(422);
      expect(errorTypeOf(other)).toBe(ERROR_TYPES.mismatch);
      expect(other.headers['idempotent-replayed']).toBeUndefined();
      expect(await provider.balance()).toBe(100);
      expect(await provider.commits()).toHaveLength(1);
    });

    it('counts an unknown field as part of the body: ignored by validation, not by the fingerprint', async () => {
      const plain = await provider.request('POST', '/charges', { key: 'extra-1', body: '{"amount":100}' });
      const extra = await provider.request('POST', '/charges', {
        key: 'extra-1',
        body: '{"amount":100,"note":"gift"}',
      });

      expect(plain.status).toBe(200);
      expect(extra.status).toBe(422);
      expect(errorTypeOf(extra)).toBe(ERROR_TYPES.mismatch);
      expect(await provider.commits()).toHaveLength(1);
    });

    it('does not care about key order or whitespace: the same parsed JSON is the same body', async () => {
      const first = await provider.request('POST', '/refunds', {
        key: 'order-1',
        body: '{"orderId":"o-1","amount":30}',
      });
      const reordered = await provider.request('POST', '/refunds', {
        key: 'order-1',
        body: '{\n  "amount" : 30,\n  "orderId" : "o-1"\n}',
      });

      expect(first.status).toBe(200);
      expect(reordered.status).toBe(200);
      expect(reordered.headers['idempotent-replayed']).toBe('true');
      expect(reordered.raw.equals(first.raw)).toBe(true);
      expect(await provider.balance()).toBe(-30);
      expect(await provider.commits()).toHaveLength(1);
    });
  });

  describe('the same key while the first request is being processed', () => {
    it('is refused with 409 idempotency_key_in_use and Retry-After, and replays once the first has finished', async () => {
      const first = slow.charge(100, 'in-use-1');
      await sleep(INTO_THE_WINDOW_MS);
      const during = await slow.charge(100, 'in-use-1');

      expect(during.status).toBe(409);
      expect(errorTypeOf(during)).toBe(ERROR_TYPES.inUse);
      expect(during.headers['retry-after']).toBe('1');
      expect(await slow.commits()).toEqual([]);

      const answered = await first;
      const after = await slow.charge(100, 'in-use-1');

      expect(answered.status).toBe(200);
      expect(after.status).toBe(200);
      expect(after.headers['idempotent-replayed']).toBe('true');
      expect(after.raw.equals(answered.raw)).toBe(true);
      expect(await slow.balance()).toBe(100);
      expect(await slow.commits()).toHaveLength(1);
    });

    it('does not use up a queued fault with the 409', async () => {
      const first = slow.charge(100, 'in-use-2');
      await sleep(INTO_THE_WINDOW_MS);
      await slow.queueFault({ path: '/charges', fault: '500-before-commit' });
      const during = await slow.charge(100, 'in-use-2');
      await first;
      const next = await slow.charge(7);

      expect(during.status).toBe(409);
      expect(next.status).toBe(500);
      expect(await slow.balance()).toBe(100);
    });
  });

  describe('keys are scoped per path', () => {
    it('runs a charge and a refund under one key as two operations', async () => {
      const charge = await provider.charge(100, 'shared-1');
      const refund = await provider.refund('o-1', 100, 'shared-1');

      expect(charge.status).toBe(200);
      expect(refund.status).toBe(200);
      expect(refund.headers['idempotent-replayed']).toBeUndefined();
      expect(idOf(refund)).toMatch(/^re_./);
      expect(await provider.balance()).toBe(0);
      expect(await provider.commits()).toMatchObject([
        { operation: 'charge', idempotencyKey: 'shared-1' },
        { operation: 'refund', orderId: 'o-1', idempotencyKey: 'shared-1' },
      ]);
    });
  });

  describe('a refused request stores nothing', () => {
    const invalidBodies: Array<[string, '/charges' | '/refunds', string]> = [
      ['a body that is not JSON', '/charges', '{"amount": 100'],
      ['a body that is not an object', '/charges', '[100]'],
      ['an amount of 0', '/charges', '{"amount":0}'],
      ['an amount of -1', '/charges', '{"amount":-1}'],
      ['an amount of 1.5', '/charges', '{"amount":1.5}'],
      ['an amount of "100"', '/charges', '{"amount":"100"}'],
      ['an amount past 2^53 - 1', '/charges', '{"amount":9007199254740992}'],
      ['no amount', '/charges', '{}'],
      ['a refund without an orderId', '/refunds', '{"amount":100}'],
      ['a refund with an empty orderId', '/refunds', '{"orderId":"","amount":100}'],
      ['a refund with an orderId that is not a string', '/refunds', '{"orderId":7,"amount":100}'],
    ];

    it.each(invalidBodies)(
      'answers %s with 400 invalid_request, and a corrected retry under the key executes',
      async (_, path, body) => {
        const key = 'corrected-1';
        const refused = await provider.request('POST', path, { key, body });

        expect(refused.status).toBe(400);
        expect(errorTypeOf(refused)).toBe(ERROR_TYPES.invalidRequest);
        expect(await provider.commits()).toEqual([]);

        const corrected = await provider.request('POST', path, {
          key,
          body: '{"orderId":"o-1","amount":100}',
        });

        expect(corrected.status).toBe(200);
        expect(corrected.headers['idempotent-replayed']).toBeUndefined();
        expect(await provider.commits()).toMatchObject([{ amount: 100, idempotencyKey: key }]);
      },
    );

    it.each([
      ['an empty key', ''],
      ['a key of 256 characters', 'k'.repeat(256)],
    ])('answers %s with 400 invalid_idempotency_key, executing nothing', async (_, key) => {
      const refused = await provider.charge(100, key);

      expect(refused.status).toBe(400);
      expect(errorTypeOf(refused)).toBe(ERROR_TYPES.invalidIdempotencyKey);
      expect(await provider.balance()).toBe(0);
      expect(await provider.commits()).toEqual([]);
    });

    it('ignores unknown fields in a valid body', async () => {
      const result = await provider.request('POST', '/charges', { body: '{"amount":100,"currency":"usd"}' });

      expect(result.status).toBe(200);
      expect(await provider.balance()).toBe(100);
    });
  });

  describe('paths, methods and sizes', () => {
    it('answers an unknown path with 404 and a JSON error', async () => {
      const result = await provider.request('GET', '/charges/ch_1');

      expect(result.status).toBe(404);
      expect(typeof errorTypeOf(result)).toBe('string');
    });

    it.each([
      ['GET', '/charges'],
      ['GET', '/refunds'],
      ['POST', '/balance'],
      ['DELETE', '/commits'],
      ['GET', '/reset'],
    ])(
      'answers %s %s, a wrong method on a known path, with 405 and changes nothing',
      async (method, path) => {
        const result = await provider.request(method, path);

        expect(result.status).toBe(405);
        expect(typeof errorTypeOf(result)).toBe('string');
        expect(await provider.commits()).toEqual([]);
      },
    );

    // A body of exactly `size` bytes: a valid charge padded with an unknown field.
    const chargeOf = (size: number) => {
      const head = '{"amount":100,"pad":"';
      return `${head}${'x'.repeat(size - head.length - 2)}"}`;
    };

    it('reads a body of exactly 64 KiB', async () => {
      const result = await provider.request('POST', '/charges', { body: chargeOf(64 * 1024) });

      expect(result.status).toBe(200);
      expect(await provider.balance()).toBe(100);
    });

    it.each([
      ['with a Content-Length', false],
      ['sent in chunks', true],
    ])('answers a body one byte over 64 KiB, %s, with 413 and commits nothing', async (_, chunked) => {
      const result = await provider.request('POST', '/charges', {
        key: 'too-large',
        body: chargeOf(64 * 1024 + 1),
        chunked,
      });

      expect(result.status).toBe(413);
      expect(typeof errorTypeOf(result)).toBe('string');
      expect(await provider.commits()).toEqual([]);
      expect((await provider.charge(100, 'too-large')).headers['idempotent-replayed']).toBeUndefined();
    });
  });

  describe('refunds', () => {
    it('lower the balance by their amount and log the order they refund', async () => {
      await provider.charge(500);
      const refund = await provider.refund('o-7', 200);

      expect(refund.status).toBe(200);
      expect(refund.body).toEqual({ id: idOf(refund), amount: 200, balance: 300 });
      expect(await provider.balance()).toBe(300);
      expect((await provider.commits())[1]).toEqual({
        seq: 2,
        id: idOf(refund),
        operation: 'refund',
        amount: 200,
        orderId: 'o-7',
        idempotencyKey: null,
      });
    });
  });

  describe('reset', () => {
    it('forgets the balance, the keys, the commit log and the queued faults', async () => {
      const before = await provider.charge(100, 'reset-1');
      await provider.queueFault({ path: '/charges', fault: '500-before-commit' });
      await provider.reset();

      expect(await provider.balance()).toBe(0);
      expect(await provider.commits()).toEqual([]);

      const after = await provider.charge(100, 'reset-1');

      expect(after.status).toBe(200);
      expect(after.headers['idempotent-replayed']).toBeUndefined();
      expect(idOf(after)).not.toBe(idOf(before));
      expect(await provider.commits()).toMatchObject([{ seq: 1, id: idOf(after) }]);
    });

    it('answers the responses it was holding', async () => {
      await provider.queueFault({ path: '/charges', fault: 'hold-after-commit' });
      const holding = provider.charge(100, 'reset-held');
      await waitUntil(async () => (await provider.held()) === 1);
      await provider.reset();

      expect((await holding).status).toBe(200);
      expect(await provider.held()).toBe(0);
      expect(await provider.balance()).toBe(0);
    });
  });

  describe('faults', () => {
    it('drop-after-commit: the client sees a socket error, the charge is committed, and a retry replays it', async () => {
      await provider.queueFault({ path: '/charges', fault: 'drop-after-commit' });

      await expect(provider.charge(100, 'drop-1')).rejects.toMatchObject({ code: 'ECONNRESET' });
      const commits = await provider.commits();
      expect(commits).toMatchObject([{ operation: 'charge', amount: 100, idempotencyKey: 'drop-1' }]);

      const retry = await provider.charge(100, 'drop-1');

      expect(retry.status).toBe(200);
      expect(retry.headers['idempotent-replayed']).toBe('true');
      expect(idOf(retry)).toBe(commits[0]?.id);
      expect(await provider.balance()).toBe(100);
    });

    it('502-after-commit: 502 bad_gateway, but committed, and a retry replays the stored 200', async () => {
      await provider.queueFault({ path: '/charges', fault: '502-after-commit' });
      const failed = await provider.charge(100, 'lost-1');

      expect(failed.status).toBe(502);
      expect(errorTypeOf(failed)).toBe(ERROR_TYPES.badGateway);
      const commits = await provider.commits();
      expect(commits).toHaveLength(1);

      const retry = await provider.charge(100, 'lost-1');

      expect(retry.status).toBe(200);
      expect(retry.headers['idempotent-replayed']).toBe('true');
      expect(idOf(retry)).toBe(commits[0]?.id);
      expect(await provider.balance()).toBe(100);
    });

    it.each([
      { fault: '502-before-commit', status: 502, type: ERROR_TYPES.badGateway, key: 'bad-gateway-1' },
      { fault: '500-before-commit', status: 500, type: ERROR_TYPES.internal, key: 'internal-1' },
    ] as const)(
      '$fault: $status $type, nothing committed, and a retry under the key executes',
      async ({ fault, status, type, key }) => {
        await provider.queueFault({ path: '/charges', fault });
        const failed = await provider.charge(100, key);

        expect(failed.status).toBe(status);
        expect(errorTypeOf(failed)).toBe(type);
        expect(await provider.commits()).toEqual([]);

        const retry = await provider.charge(100, key);

        expect(retry.status).toBe(200);
        expect(retry.headers['idempotent-replayed']).toBeUndefined();
        expect(await provider.commits()).toHaveLength(1);
        expect(await provider.balance()).toBe(100);
      },
    );

    it('garbage-after-commit: 200 with a body that is not JSON, committed, and a retry replays the JSON', async () => {
      await provider.queueFault({ path: '/charges', fault: 'garbage-after-commit' });
      const garbled = await provider.charge(100, 'garbage-1');

      expect(garbled.status).toBe(200);
      expect(garbled.raw.toString()).toBe('<html>oops');
      const commits = await provider.commits();
      expect(commits).toHaveLength(1);

      const retry = await provider.charge(100, 'garbage-1');

      expect(retry.status).toBe(200);
      expect(retry.headers['idempotent-replayed']).toBe('true');
      expect(retry.body).toEqual({ id: commits[0]?.id, amount: 100, balance: 100 });
    });

    it('hold-after-commit: held until released; a retry meanwhile replays the stored 200', async () => {
      await provider.queueFault({ path: '/charges', fault: 'hold-after-commit' });
      const holding = provider.charge(100, 'held-1');
      await waitUntil(async () => (await provider.held()) === 1);

      expect(await provider.commits()).toHaveLength(1);
      const retry = await provider.charge(100, 'held-1');
      expect(retry.status).toBe(200);
      expect(retry.headers['idempotent-replayed']).toBe('true');

      expect(await provider.release()).toBe(1);
      const released = await holding;

      expect(released.status).toBe(200);
      expect(released.raw.equals(retry.raw)).toBe(true);
      expect(await provider.held()).toBe(0);
      expect(await provider.balance()).toBe(100);
    });

    it('delay: the request waits delayMs, processing (its key in use), then commits normally', async () => {
      await provider.queueFault({ path: '/charges', fault: 'delay', delayMs: 800 });
      const started = performance.now();
      const delayed = provider.charge(100, 'delay-1');
      await sleep(INTO_THE_WINDOW_MS);
      const during = await provider.charge(100, 'delay-1');
      const answered = await delayed;

      expect(during.status).toBe(409);
      expect(answered.status).toBe(200);
      expect(performance.now() - started).toBeGreaterThanOrEqual(750);
      expect(await provider.commits()).toHaveLength(1);
    });

    it('fails the next `count` requests to its path, earlier faults first, one fault per request', async () => {
      expect(await provider.queueFault({ path: '/charges', fault: '500-before-commit' })).toBe(1);
      expect(await provider.queueFault({ path: '/charges', fault: '502-before-commit', count: 2 })).toBe(3);

      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push((await provider.charge(100)).status);

      expect(statuses).toEqual([500, 502, 502, 200]);
      expect(await provider.balance()).toBe(100);
    });

    it('applies to its own path only', async () => {
      await provider.queueFault({ path: '/refunds', fault: '500-before-commit' });

      expect((await provider.charge(100)).status).toBe(200);
      expect((await provider.refund('o-1', 40)).status).toBe(500);
      expect(await provider.balance()).toBe(100);
    });

    it('is used up only by a request that executes: not by a replay, a 422 or a 400', async () => {
      await provider.charge(100, 'consumed-1');
      await provider.queueFault({ path: '/charges', fault: '500-before-commit' });

      expect((await provider.charge(100, 'consumed-1')).status).toBe(200);
      expect((await provider.charge(999, 'consumed-1')).status).toBe(422);
      expect((await provider.request('POST', '/charges', { body: '{"amount":0}' })).status).toBe(400);
      expect((await provider.charge(5)).status).toBe(500);
      expect((await provider.charge(5)).status).toBe(200);
      expect(await provider.balance()).toBe(105);
    });

    it.each([
      ['an unknown kind', { path: '/charges', fault: 'explode' }],
      ['an unknown path', { path: '/balance', fault: '502-before-commit' }],
      ['a count of 0', { path: '/charges', fault: '502-before-commit', count: 0 }],
    ])('refuses %s with 400 and queues nothing', async (_, spec) => {
      const refused = await provider.request('POST', '/faults', { body: JSON.stringify(spec) });

      expect(refused.status).toBe(400);
      expect(errorTypeOf(refused)).toBe(ERROR_TYPES.invalidRequest);
      expect((await provider.charge(100)).status).toBe(200);
    });
  });

  describe('key retention', () => {
    it('forgets a key after --key-retention-seconds: the same key then executes again', async () => {
      const first = await forgetful.charge(100, 'retained-1');
      expect((await forgetful.charge(100, 'retained-1')).headers['idempotent-replayed']).toBe('true');

      await sleep(1_200);
      const later = await forgetful.charge(100, 'retained-1');

      expect(later.status).toBe(200);
      expect(later.headers['idempotent-replayed']).toBeUndefined();
      expect(idOf(later)).not.toBe(idOf(first));
      expect(await forgetful.balance()).toBe(200);
      expect(await forgetful.commits()).toHaveLength(2);
    });
  });

  describe('the process', () => {
    it('exits 0 on SIGTERM', async () => {
      const own = await startProviderProcess(command);

      expect(await own.stop()).toBe(0);
    });

    it('exits 0 on SIGTERM when it runs its handler late, as on a busy machine', async () => {
      const own = await startProviderProcess(command);
      // The serving process unscheduled for 200 ms while the SIGTERM arrives: a wrapper that gives
      // its child tens of milliseconds to acknowledge the signal kills it instead, and exits 143.
      const serving = listenerOf(own.pid, Number(new URL(own.url).port));
      process.kill(serving, 'SIGSTOP');
      const resumed = setTimeout(() => process.kill(serving, 'SIGCONT'), 200);

      expect(await own.stop()).toBe(0);
      clearTimeout(resumed);
    });

    it('is gone after SIGKILL: nothing answers on its port', async () => {
      const own = await startProviderProcess(command);
      await own.kill();

      await expect(own.balance()).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    });
  });
});

describe('demo/payment-provider/api.ts itself', () => {
  const [tsxProvider] = PROVIDER_IMPLEMENTATIONS;

  it('refuses a bad flag with a message that names it', async () => {
    if (!tsxProvider) throw new Error('PROVIDER_IMPLEMENTATIONS lost demo/payment-provider/api.ts');

    await expect(startProviderProcess([...tsxProvider.command, '--latency-ms', 'soon'])).rejects.toThrow(
      /--latency-ms must be a whole number/,
    );
  });

  it('embeds in a process with startProvider, serving the same wire', async () => {
    const embedded = await startProvider({ port: 0 });
    try {
      const post = () =>
        fetch(`${embedded.url}/charges`, {
          method: 'POST',
          headers: { 'idempotency-key': 'embedded-1' },
          body: '{"amount":100}',
        });
      const first = await post();
      const retry = await post();

      expect(first.status).toBe(200);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(await retry.text()).toBe(await first.text());
      expect(await (await fetch(`${embedded.url}/balance`)).json()).toEqual({ balance: 100 });
    } finally {
      await embedded.close();
    }
  });
});

describe('startProviderProcess', () => {
  it('rejects, with the process stderr, when the command exits before listening', async () => {
    await expect(
      startProviderProcess([
        process.execPath,
        '-e',
        'console.error("no provider here"); process.exit(3)',
        '--',
      ]),
    ).rejects.toThrow(/exited with 3 before listening[\s\S]*no provider here/);
  });
});
