// --- A tool's writes in its record's transaction, written once ---
//
// What a transactional store (SQLite, Postgres) promises beyond the store contract: a tool that
// writes through `begin` commits its write with its record, or not at all. Run against each such
// store from test/idempotency/stores/contract.test.ts; what one database alone can get wrong (SQLite refusing a
// COMMIT under the record, Postgres handing its pool's connections back) stays in its own file.

import type { ClaimTicket, RecordId } from 'mcp-request-idempotency';
import { afterEach, describe, expect, it } from 'vitest';
import { waitUntil } from '../../demo/processes/bounds.js';
import type { ContractStore } from './store-contract.js';
import {
  claimTicket,
  ERROR,
  FINGERPRINT,
  LEASE_MS,
  newId,
  OTHER_FINGERPRINT,
  RESULT,
  RETENTION_MS,
  replayOf,
  SHORT_MS,
} from './store-fixtures.js';

/** How the contract reaches one database: its stores, and a tool's statements in their transactions. */
export interface TransactionalBackend<S extends ContractStore> {
  /** A store on the database: each call another instance, with connections of its own. */
  open(): Promise<S>;
  /** The tool's write, through `begin(ticket)`: one effect row under the ticket's key. */
  write(store: S, ticket: ClaimTicket): Promise<unknown>;
  /** A statement of the tool's, in the same transaction, that the database refuses. */
  failStatement(store: S, ticket: ClaimTicket): Promise<unknown>;
  /** What the database says of that statement. */
  failure: RegExp;
  /** The effect rows under a key, as another connection sees them. */
  effectsOf(id: RecordId): Promise<number>;
}

export function describeTransactionalContract<S extends ContractStore>(
  name: string,
  backend: TransactionalBackend<S> | undefined,
): void {
  describe.skipIf(!backend)(`a tool's writes in its record's transaction, on ${name}`, () => {
    const opened: S[] = [];
    const db = (): TransactionalBackend<S> => {
      if (!backend) throw new Error(`unreachable: skipped without ${name}`);
      return backend;
    };
    const open = async () => {
      const store = await db().open();
      opened.push(store);
      return store;
    };
    afterEach(async () => {
      await Promise.all(opened.splice(0).map((store) => store.close?.()));
    });

    it('commits the write with its record: invisible to another connection before complete, both there after', async () => {
      const [store, other] = [await open(), await open()];
      const id = newId();
      const ticket = await claimTicket(store, id);
      await db().write(store, ticket);
      expect(await db().effectsOf(id)).toBe(0);

      expect(await store.complete(ticket, RESULT, RETENTION_MS)).toBe(true);

      expect(await db().effectsOf(id)).toBe(1);
      expect(await other.claim(id, FINGERPRINT, LEASE_MS)).toStrictEqual(replayOf(RESULT));
    });

    it('rolls the write back with a record whose claim lost its key, and leaves the new holder its claim', async () => {
      const [stalled, survivor] = [await open(), await open()];
      const id = newId();
      const stale = await claimTicket(stalled, id, SHORT_MS);
      // The stalled instance's lease runs out; another instance takes the key.
      let fresh: ClaimTicket | undefined;
      await waitUntil(async () => {
        const claim = await survivor.claim(id, FINGERPRINT, LEASE_MS);
        if (claim.state === 'claimed') fresh = claim.ticket;
        return fresh !== undefined;
      });
      await db().write(stalled, stale);

      expect(await stalled.complete(stale, RESULT, RETENTION_MS)).toBe(false);

      expect(await db().effectsOf(id)).toBe(0);
      expect(await stalled.claim(id, OTHER_FINGERPRINT, LEASE_MS)).toStrictEqual({
        state: 'inProgress',
        fingerprint: FINGERPRINT,
      });
      expect(fresh && (await survivor.complete(fresh, RESULT, RETENTION_MS))).toBe(true);
    });

    it("records the tool's error on its own when a statement of the tool's failed, and nothing it wrote stands", async () => {
      const store = await open();
      const id = newId();
      const ticket = await claimTicket(store, id);
      await db().write(store, ticket);
      await expect(db().failStatement(store, ticket)).rejects.toThrow(db().failure);

      expect(await store.complete(ticket, ERROR, RETENTION_MS)).toBe(true);

      expect(await db().effectsOf(id)).toBe(0);
      expect(await store.claim(id, FINGERPRINT, LEASE_MS)).toStrictEqual(replayOf(ERROR));
    });

    it('rolls the write back on release: nothing ran, nothing stands', async () => {
      const store = await open();
      const id = newId();
      const ticket = await claimTicket(store, id);
      await db().write(store, ticket);

      expect(await store.release(ticket)).toBe(true);

      expect(await db().effectsOf(id)).toBe(0);
      expect((await store.claim(id, FINGERPRINT, LEASE_MS)).state).toBe('claimed');
    });
  });
}
