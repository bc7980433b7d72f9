// --- A shared dedup store in Redis (SEP-3182 stateless deployments) ---
//
// With no session affinity a retry can land on any instance, so every instance must see
// the same records (SEP-3182, stateless deployments). Each operation is one atomic Redis
// command, so instances need no locks and no coordination of their own:
//   claim    = SET key <inProgress> NX PX lease GET   (1 round trip)
//   complete = EVAL "replace it only if it is still my claim"   (1 round trip)
//   renew    = EVAL "extend its lease only if it is still my claim"   (only for a call still
//              running after a third of its lease: one round trip per third)
// A replay, a conflict and an in-progress answer cost one round trip; a first execution two.
// Redis expiry does all eviction: the lease is the in-progress record's TTL, retention the
// completed record's TTL. Requires Redis ≥ 7.0 (SET with both NX and GET).

import { randomUUID } from 'node:crypto';
import { createClient, ErrorReply, type RedisClientType } from '@redis/client';
import type { Fingerprint } from './fingerprint.js';
import {
  type Claim,
  type ClaimTicket,
  type IdempotencyStore,
  type RecordId,
  type StoredResponse,
  StoreUnavailableError,
} from './store.js';

/** Every key the store writes starts with this, so `clear()` can find exactly its own keys. */
export const DEFAULT_REDIS_KEY_PREFIX = 'sep3182:idem:';

/**
 * How long one Redis command may take before the call fails closed. Loopback or same-zone
 * Redis answers in about a millisecond; a second means it is down, frozen or overloaded,
 * and the caller is better served by an immediate "retry later, same key" than by waiting.
 */
export const DEFAULT_REDIS_COMMAND_TIMEOUT_MS = 1_000;

/** How long `connectRedis` waits for the first connection before refusing to start. */
export const DEFAULT_REDIS_CONNECT_TIMEOUT_MS = 2_000;

/** Ceiling of the reconnect back-off: a recovered Redis is back in service within about a second. */
const MAX_RECONNECT_DELAY_MS = 1_000;

/** Commands sent but unanswered before node-redis refuses more: a frozen Redis must not eat memory. */
const MAX_PENDING_COMMANDS = 10_000;

/** A node-redis client, as `connectRedis` makes it; a store and a ledger can share one. */
export type RedisClient = RedisClientType;

export interface RedisStoreOptions {
  keyPrefix?: string;
  /** Bound on every store command; past it `claim`/`complete` reject and the guard fails closed. */
  commandTimeoutMs?: number;
}

export interface RedisConnectOptions {
  connectTimeoutMs?: number;
  /**
   * Told about every connection error, including each failed reconnect attempt. Callers
   * already learn of an outage as a `StoreUnavailableError`; this is for the operator's log.
   */
  onError?: (error: unknown) => void;
}

/**
 * Connects a client configured to fail closed and heal by itself: while Redis is
 * unreachable every command rejects at once, and the client keeps reconnecting in the
 * background so the same store works again as soon as Redis is back.
 * Rejects with `StoreUnavailableError` if Redis does not answer within `connectTimeoutMs`.
 */
export async function connectRedis(url: string, options: RedisConnectOptions = {}): Promise<RedisClient> {
  const connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_REDIS_CONNECT_TIMEOUT_MS;
  const client: RedisClient = createClient({
    url,
    // While disconnected, reject a command at once (ClientOfflineError) instead of parking
    // it in node-redis' offline queue until Redis returns: the guard must answer now.
    disableOfflineQueue: true,
    // A Redis that accepts commands but never answers (frozen) makes them pile up, each
    // already failed by the store's deadline; past this many, node-redis refuses new ones.
    commandsQueueMaxLength: MAX_PENDING_COMMANDS,
    socket: {
      connectTimeout: connectTimeoutMs,
      // Never give up (returning false would close the client for good): exponential
      // back-off from 50 ms to 1 s, with jitter so a fleet does not reconnect in lockstep.
      reconnectStrategy: (retries) =>
        Math.min(50 * 2 ** retries, MAX_RECONNECT_DELAY_MS) + Math.floor(Math.random() * 100),
    },
  });
  // node-redis emits 'error' on every failed (re)connect; an EventEmitter with no listener
  // would turn that into an uncaught exception and take the whole server down with Redis.
  client.on('error', options.onError ?? (() => {}));

  // `connect()` itself retries forever while Redis is down; a server should not start
  // half-configured, so give up after `connectTimeoutMs` and stop the retries.
  try {
    await withDeadline(client.connect(), connectTimeoutMs);
  } catch (error) {
    client.destroy();
    throw new StoreUnavailableError(error);
  }
  return client;
}

// The claim is released only by the claimant: replace the value with the completed record
// if, and only if, it is still the exact in-progress value this claim wrote (its token is
// unique). A claim whose lease expired, and maybe was re-claimed, changes nothing. Lua runs
// atomically, so nothing can slip in between the GET and the SET.
const COMPLETE_SCRIPT = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return false`;

// A live claim's lease is extended by its claimant only, and only while the key still holds
// this claim's exact value: a claim that already lost its key must not resurrect it.
const RENEW_SCRIPT = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`;

export class RedisIdempotencyStore implements IdempotencyStore {
  readonly keyPrefix: string;
  private readonly commandTimeoutMs: number;
  private ownsClient = false;

  /** Connects its own client (see `connectRedis`); `close()` closes it. */
  static async connect(
    url: string,
    options: RedisStoreOptions & RedisConnectOptions = {},
  ): Promise<RedisIdempotencyStore> {
    const store = new RedisIdempotencyStore(await connectRedis(url, options), options);
    store.ownsClient = true;
    return store;
  }

  /**
   * Uses a client someone else owns (to share one connection with a `RedisLedger`, say).
   * Make it with `connectRedis`: a client with an offline queue makes callers wait for the
   * command timeout, instead of failing at once, while Redis is down.
   */
  constructor(
    private readonly client: RedisClient,
    options: RedisStoreOptions = {},
  ) {
    this.keyPrefix = options.keyPrefix ?? DEFAULT_REDIS_KEY_PREFIX;
    this.commandTimeoutMs = options.commandTimeoutMs ?? DEFAULT_REDIS_COMMAND_TIMEOUT_MS;
  }

  // No `maxRecords` here, and never `full` from a count: counting records would cost a
  // round trip. The cap on a Redis store is the operator's `maxmemory`, with the default
  // `maxmemory-policy noeviction`: at the limit Redis refuses writes, reported below as
  // `full` (replays too, since a claim is a write), instead of evicting a live record
  // whose retry would then execute a second time.
  async claim(id: RecordId, fingerprint: Fingerprint, leaseMs: number): Promise<Claim> {
    const lease = milliseconds(leaseMs);
    const token = randomUUID();
    let holder: string | null;
    try {
      // It may not look it, but this is safe from races across any number of instances:
      // Redis executes one command at a time, so of N concurrent SET NX on one key exactly
      // one finds it free. GET hands the others the record that holds the key, in the
      // same round trip. The PX lease frees the key if this instance dies mid-execution.
      holder = await this.bounded(
        this.client.set(this.keyOf(id), inProgressValue(fingerprint, token), {
          condition: 'NX',
          expiration: { type: 'PX', value: lease },
          GET: true,
        }),
      );
    } catch (error) {
      if (isOutOfMemory(error)) return { state: 'full' };
      // Fail closed. A command that timed out may still have claimed the key; its retry
      // then sees `inProgress` until the lease ends, which is the safe side to err on.
      throw new StoreUnavailableError(error);
    }
    if (holder === null) return { state: 'claimed', ticket: { ...id, fingerprint, token } };
    return claimOf(holder);
  }

  async complete(ticket: ClaimTicket, response: StoredResponse, retentionMs: number): Promise<boolean> {
    const retention = milliseconds(retentionMs);
    const completed: CompletedValue = { state: 'completed', fingerprint: ticket.fingerprint, response };
    try {
      // EVAL, not EVALSHA: one round trip always. EVALSHA needs a second one (NOSCRIPT, then
      // EVAL) after every Redis restart or failover; Redis caches the compiled script by its
      // SHA either way, so EVAL only costs the script's ~150 bytes on the wire.
      // The script answers OK when it replaced the claim, nil when the key had moved on.
      const replaced = await this.bounded(
        this.client.eval(COMPLETE_SCRIPT, {
          keys: [this.keyOf(ticket)],
          arguments: [
            inProgressValue(ticket.fingerprint, ticket.token),
            JSON.stringify(completed),
            String(retention),
          ],
        }),
      );
      return replaced !== null;
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
  }

  async renew(ticket: ClaimTicket, leaseMs: number): Promise<boolean> {
    const lease = milliseconds(leaseMs);
    try {
      const renewed = await this.bounded(
        this.client.eval(RENEW_SCRIPT, {
          keys: [this.keyOf(ticket)],
          arguments: [inProgressValue(ticket.fingerprint, ticket.token), String(lease)],
        }),
      );
      return renewed === 1;
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
  }

  /** Deletes this store's keys only (SCAN + UNLINK): the Redis may hold other data, so never FLUSHALL. */
  async clear(): Promise<void> {
    const match = `${escapeGlob(this.keyPrefix)}*`;
    try {
      let cursor = '0';
      do {
        const page = await this.bounded(this.client.scan(cursor, { MATCH: match, COUNT: 1000 }));
        if (page.keys.length > 0) await this.bounded(this.client.unlink(page.keys));
        cursor = page.cursor;
      } while (cursor !== '0');
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
  }

  /** Closes the client if `connect` made it; a shared client is its owner's to close. */
  async close(): Promise<void> {
    if (this.ownsClient) await closeRedis(this.client);
  }

  /**
   * Fails the call once `commandTimeoutMs` has passed without a reply. node-redis' own
   * `timeout` command option cannot do this: it only covers a command still waiting to be
   * written, and is dropped once the command is on the socket (commands-queue.js,
   * `commandsToWrite`), so a command sent to a frozen Redis would wait forever. The
   * reply, if it ever comes, is matched to the abandoned command and ignored.
   */
  private bounded<T>(command: Promise<T>): Promise<T> {
    return withDeadline(command, this.commandTimeoutMs);
  }

  private keyOf(id: RecordId): string {
    // JSON keeps (scope, key) pairs distinct whatever characters either contains.
    return this.keyPrefix + JSON.stringify([id.scope, id.idempotencyKey]);
  }
}

/**
 * Closes a client gracefully (pending replies first), but never waits on a Redis that is
 * gone: after `graceMs` the socket is dropped and whatever is pending is rejected.
 */
export async function closeRedis(
  client: RedisClient,
  graceMs = DEFAULT_REDIS_COMMAND_TIMEOUT_MS,
): Promise<void> {
  try {
    await withDeadline(client.close(), graceMs);
  } catch {
    // Already closed, or Redis is gone and the replies with it: drop the socket below.
  } finally {
    client.destroy();
  }
}

// --- What a key holds: a claim being executed, or the response it produced ---
//
// JSON, so `redis-cli GET` shows an operator what a key is doing. A stored response goes
// back out as JSON on the wire anyway, so JSON is exactly as faithful as the wire.

interface InProgressValue {
  state: 'inProgress';
  fingerprint: Fingerprint;
  token: string;
}

interface CompletedValue {
  state: 'completed';
  fingerprint: Fingerprint;
  response: StoredResponse;
}

// Deterministic: `complete` rebuilds these exact bytes from its ticket to recognise its claim.
function inProgressValue(fingerprint: Fingerprint, token: string): string {
  const value: InProgressValue = { state: 'inProgress', fingerprint, token };
  return JSON.stringify(value);
}

/** The answer for a key someone else holds. Anything unreadable fails closed. */
function claimOf(raw: string): Claim {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (error) {
    throw new StoreUnavailableError(error);
  }
  const state = field(value, 'state');
  const fingerprint = field(value, 'fingerprint');
  if (typeof fingerprint === 'string') {
    if (state === 'inProgress') return { state: 'inProgress', fingerprint };
    const response = storedResponseOf(field(value, 'response'));
    if (state === 'completed' && response) return { state: 'completed', fingerprint, response };
  }
  throw new StoreUnavailableError(new Error(`unreadable idempotency record: ${raw.slice(0, 200)}`));
}

function storedResponseOf(value: unknown): StoredResponse | undefined {
  const result = field(value, 'result');
  if (isPlainObject(result)) return { result };
  const error = field(value, 'error');
  const code = field(error, 'code');
  const message = field(error, 'message');
  if (typeof code !== 'number' || typeof message !== 'string') return undefined;
  // `data` is optional: present (even as null) only if the original had it.
  return isPlainObject(error) && Object.hasOwn(error, 'data')
    ? { error: { code, message, data: error.data } }
    : { error: { code, message } };
}

function field(value: unknown, name: string): unknown {
  return isPlainObject(value) ? value[name] : undefined;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Redis refused a write because `maxmemory` is reached under `noeviction`. */
function isOutOfMemory(error: unknown): boolean {
  return error instanceof ErrorReply && error.message.startsWith('OOM');
}

/** Rejects once `ms` have passed; the losing promise's own outcome is still handled by `race`. */
async function withDeadline<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no reply from Redis within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** PX takes a positive whole number of milliseconds. */
function milliseconds(ms: number): number {
  if (!Number.isFinite(ms) || ms <= 0) throw new RangeError(`not a positive TTL in ms: ${ms}`);
  return Math.ceil(ms);
}

/** SCAN MATCH is a glob: a prefix containing `*`, `?`, `[` or `\` must match only itself. */
function escapeGlob(literal: string): string {
  return literal.replace(/[*?[\]\\]/g, '\\$&');
}
