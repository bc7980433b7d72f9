// --- A shared dedup store in Redis (SEP-3182 stateless deployments) ---
//
// With no session affinity a retry can land on any instance, so every instance must see
// the same records (SEP-3182, stateless deployments). Each operation is one atomic Redis
// script, so instances need no locks and no coordination of their own:
//   claim    = "the record if there is one; else, within the caller's quota, my claim, with PX
//              lease"   (1 round trip)
//   complete = "replace it only if it is still my claim"   (1 round trip; `awaitInput` is the
//              same script writing an awaiting-input record, `release` its undo)
//   renew    = "extend its lease only if it is still my claim"   (only for a call still running
//              after a third of its lease: one round trip per third)
// Each is sent as EVALSHA, by its digest: Redis keeps every script it has run compiled under its
// SHA-1, so a call sends its keys and arguments, not the script. A Redis that has forgotten it
// (a restart, SCRIPT FLUSH, a failover to a replica that never ran it) answers NOSCRIPT without
// running anything, and the store sends the script whole once (`RedisScript`).
// A replay, a conflict and an in-progress answer cost one round trip; a first execution two.
// Redis expiry does all eviction: the lease is the in-progress record's TTL, retention the
// completed record's TTL. Each caller's quota is kept beside its records: a sorted set of its
// record keys scored by expiry, and a hash of their sizes, which every claim prunes of what has
// expired, so the count needs no round trip of its own and follows Redis' own expiry. Requires
// Redis ≥ 7.0 (TIME inside a script that writes).
//
// The same store runs on one Redis or on a Redis Cluster (`connectRedisCluster`): the keys a
// script touches share a hash slot (see `redisKeysOf`), so each script still runs on one node.
//
// Two facts about the Redis it runs on decide whether "once" can hold, and the store checks both
// (see "The environment" below): that Redis never evicts a record (its `maxmemory-policy`, read
// when the store starts and every `environmentCheckMs` after), and that its data did not vanish
// under a running call (a marker key with no expiry, read by the claim script itself).

import { createHash, randomUUID } from 'node:crypto';
import {
  createClient,
  createCluster,
  ErrorReply,
  type RedisClientOptions,
  type RedisClientType,
  type RedisClusterType,
} from '@redis/client';
import type { Fingerprint } from '../../core/fingerprint.js';
import {
  type Claim,
  type ClaimTicket,
  type IdempotencyStore,
  type RecordId,
  type StoredResponse,
  StoreUnavailableError,
} from '../contract.js';
import {
  claimOfHeld,
  isPlainObject,
  milliseconds,
  parsedJson,
  positiveInteger,
  reconnectDelayMs,
  type ScopeQuotaOptions,
  scopeQuotasOf,
  withDeadline,
} from '../support.js';
import { ARM_SCRIPT, CLAIM_SCRIPT, COMPLETE_SCRIPT, RELEASE_SCRIPT, RENEW_SCRIPT } from './scripts.js';

/**
 * A script Redis runs by its SHA-1 (EVALSHA). Redis answers NOSCRIPT, having run nothing, when it
 * does not have the script (a restart, SCRIPT FLUSH, a failover): then it is sent whole (EVAL),
 * which runs it and has Redis keep it for the calls after. On a cluster both go to the node that
 * serves the first key, so each node learns the script the first time it runs it.
 */
class RedisScript {
  private readonly sha: string;

  constructor(private readonly text: string) {
    this.sha = createHash('sha1').update(text).digest('hex');
  }

  /** Has `node` keep the script; a refusal is no error, since `run` sends it whole then. */
  async loadInto(node: RedisClientType): Promise<void> {
    try {
      await node.scriptLoad(this.text);
    } catch (error) {
      if (!(error instanceof ErrorReply)) throw error;
    }
  }

  async run(client: RedisClient, options: { keys: string[]; arguments: string[] }): Promise<unknown> {
    try {
      return await client.evalSha(this.sha, options);
    } catch (error) {
      if (!(error instanceof ErrorReply && error.message.startsWith('NOSCRIPT'))) throw error;
      return client.eval(this.text, options);
    }
  }
}

const CLAIM = new RedisScript(CLAIM_SCRIPT);
const COMPLETE = new RedisScript(COMPLETE_SCRIPT);
const RELEASE = new RedisScript(RELEASE_SCRIPT);
const RENEW = new RedisScript(RENEW_SCRIPT);
const SCRIPTS = [CLAIM, COMPLETE, RELEASE, RENEW];

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

/** How often a running store reads Redis' eviction policy again (one `INFO memory` per master). */
export const DEFAULT_REDIS_ENVIRONMENT_CHECK_MS = 1_000;

/** Commands sent but unanswered before node-redis refuses more: a frozen Redis must not eat memory. */
const MAX_PENDING_COMMANDS = 10_000;

/**
 * A node-redis client, as `connectRedis` (one Redis) or `connectRedisCluster` makes it; a store
 * and a ledger can share one.
 */
export type RedisClient = RedisClientType | RedisClusterType;

export interface RedisStoreOptions extends ScopeQuotaOptions {
  keyPrefix?: string;
  /** Bound on every store command; past it `claim`/`complete` reject and the guard fails closed. */
  commandTimeoutMs?: number;
  /**
   * How often the running store reads the eviction policy again: a `CONFIG SET` that makes Redis
   * evict fails new keyed calls closed within this long (one `INFO memory` per master, off the
   * path of any call).
   */
  environmentCheckMs?: number;
  /**
   * The `maxmemory-policy` your Redis runs with, stated for a Redis that lets this user read it
   * neither by `INFO` nor by `CONFIG GET`: only `'noeviction'` is taken, and only then. A Redis
   * that says its policy is believed, whatever is stated here.
   */
  maxmemoryPolicy?: string;
}

/**
 * The store refuses this Redis: it may evict the records, or will not say whether it does. The
 * message is one line, naming the setting and the fix.
 */
export class RedisEnvironmentError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RedisEnvironmentError';
  }
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
export async function connectRedis(url: string, options: RedisConnectOptions = {}): Promise<RedisClientType> {
  const connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_REDIS_CONNECT_TIMEOUT_MS;
  const client: RedisClientType = createClient({ url, ...failClosed(connectTimeoutMs) });
  return connected(client, options.onError, connectTimeoutMs);
}

/**
 * The same for a Redis Cluster, from the URLs of some of its nodes (the seeds): node-redis asks
 * them for the slot map and connects to every master. Each node connection fails closed as
 * above, so a master that is down fails the keys it serves at once while the other masters
 * serve theirs; a MOVED reply (a slot moved to another master) makes node-redis refresh the
 * map and resend, and a master that comes back is used again without anyone's help. Refuses
 * to start, like `connectRedis`, unless every master answers within `connectTimeoutMs`.
 */
export async function connectRedisCluster(
  seedUrls: readonly string[],
  options: RedisConnectOptions = {},
): Promise<RedisClusterType> {
  const [first] = seedUrls;
  if (first === undefined) throw new RangeError('a Redis Cluster needs at least one seed URL');
  // The nodes node-redis discovers would be reached without TLS, whatever the seeds say (that
  // takes `defaults.socket.tls`, and certificates this library has no test for): refuse, loudly,
  // rather than send the records of a TLS deployment in the clear.
  if (seedUrls.some((url) => url.startsWith('rediss:'))) {
    throw new RangeError(
      'connectRedisCluster does not support TLS (rediss://): the nodes it discovers would be reached without it; use redis:// seed URLs',
    );
  }
  const connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_REDIS_CONNECT_TIMEOUT_MS;
  const cluster: RedisClusterType = createCluster({
    rootNodes: seedUrls.map((url) => ({ url })),
    // The seeds' URLs are only read to find the slot map: every node connection, the seeds'
    // included, is made from these defaults, so the first seed's credentials go here too.
    defaults: { ...failClosed(connectTimeoutMs), ...credentialsOf(first) },
  });
  // A master's connection reports its errors as 'node-error', not 'error': listened to as
  // well, so the operator's log sees a master go down.
  cluster.on('node-error', options.onError ?? (() => {}));
  return connected(cluster, options.onError, connectTimeoutMs);
}

/** What makes a node-redis connection fail closed and heal by itself (see `connectRedis`). */
function failClosed(connectTimeoutMs: number) {
  return {
    // While disconnected, reject a command at once (ClientOfflineError) instead of parking
    // it in node-redis' offline queue until Redis returns: the guard must answer now.
    disableOfflineQueue: true,
    // A Redis that accepts commands but never answers (frozen) makes them pile up, each
    // already failed by the store's deadline; past this many, node-redis refuses new ones.
    commandsQueueMaxLength: MAX_PENDING_COMMANDS,
    socket: {
      connectTimeout: connectTimeoutMs,
      // Never give up (returning false would close the client for good): see `reconnectDelayMs`.
      reconnectStrategy: reconnectDelayMs,
    },
  } satisfies RedisClientOptions;
}

/** The user name and password in a `redis://user:password@host:port` URL, if any. */
function credentialsOf(url: string): Pick<RedisClientOptions, 'username' | 'password'> {
  const { username, password } = new URL(url);
  return {
    ...(username && { username: decodeURIComponent(username) }),
    ...(password && { password: decodeURIComponent(password) }),
  };
}

/** Connects `client`, or gives up after `connectTimeoutMs` (see `connectRedis`). */
async function connected<Client extends RedisClient>(
  client: Client,
  onError: ((error: unknown) => void) | undefined,
  connectTimeoutMs: number,
): Promise<Client> {
  // node-redis emits 'error' on every failed (re)connect; an EventEmitter with no listener
  // would turn that into an uncaught exception and take the whole server down with Redis.
  client.on('error', onError ?? (() => {}));

  // `connect()` itself retries forever while Redis is down; a server should not start
  // half-configured, so give up after `connectTimeoutMs` and stop the retries.
  try {
    await withDeadline<unknown>(client.connect(), connectTimeoutMs, 'Redis');
  } catch (error) {
    client.destroy();
    throw new StoreUnavailableError(error);
  }
  return client;
}

export class RedisIdempotencyStore implements IdempotencyStore {
  readonly keyPrefix: string;
  readonly maxRecordsPerScope: number;
  readonly maxBytesPerScope: number;
  private readonly commandTimeoutMs: number;
  private readonly maxmemoryPolicy: string | undefined;
  /** The client, for the calls' scripts: without node-redis' own timeout (see the constructor). */
  private readonly calls: RedisClient;
  private ownsClient = false;
  /** Told when the store starts refusing this Redis, and why (the operator's log). */
  private onError: ((error: unknown) => void) | undefined;
  /** Set once the environment was read and the marker armed; until then each claim waits for it. */
  private started = false;
  private starting: Promise<void> | undefined;
  /** Why claims are refused now (an evicting Redis), or undefined. */
  private refusal: string | undefined;
  private readonly checks: NodeJS.Timeout;
  /** The loss last told to `onError` (its time), so a fleet of refused claims tells it once. */
  private lostReported: number | undefined;

  /** Connects its own client (see `connectRedis`); `close()` closes it. */
  static async connect(
    url: string,
    options: RedisStoreOptions & RedisConnectOptions = {},
  ): Promise<RedisIdempotencyStore> {
    return RedisIdempotencyStore.owning(options, () => connectRedis(url, options), options.onError);
  }

  /** The same on a Redis Cluster, from the URLs of some of its nodes (see `connectRedisCluster`). */
  static async connectCluster(
    seedUrls: readonly string[],
    options: RedisStoreOptions & RedisConnectOptions = {},
  ): Promise<RedisIdempotencyStore> {
    return RedisIdempotencyStore.owning(
      options,
      () => connectRedisCluster(seedUrls, options),
      options.onError,
    );
  }

  /**
   * Checks the options before connecting: a bad one refuses at once, and leaves no client behind.
   * Then checks the Redis (see `ready`): one it cannot be safe on is refused, the client closed.
   */
  private static async owning(
    options: RedisStoreOptions,
    connect: () => Promise<RedisClient>,
    onError: ((error: unknown) => void) | undefined,
  ): Promise<RedisIdempotencyStore> {
    const settings = settingsOf(options);
    const store = new RedisIdempotencyStore(await connect(), settings);
    store.ownsClient = true;
    store.onError = onError;
    try {
      await store.ready();
    } catch (error) {
      await store.close();
      throw error;
    }
    return store;
  }

  /**
   * Uses a client someone else owns (to share one connection with the server's own Redis data, say).
   * Make it with `connectRedis` or `connectRedisCluster`: a client with an offline queue makes
   * callers wait for the command timeout, instead of failing at once, while Redis is down.
   */
  constructor(
    private readonly client: RedisClient,
    options: RedisStoreOptions = {},
  ) {
    const settings = settingsOf(options);
    this.keyPrefix = settings.keyPrefix;
    this.commandTimeoutMs = settings.commandTimeoutMs;
    this.maxRecordsPerScope = settings.maxRecordsPerScope;
    this.maxBytesPerScope = settings.maxBytesPerScope;
    this.maxmemoryPolicy = settings.maxmemoryPolicy;
    // node-redis gives each command a timeout of its own (5 s by default): an AbortSignal and its
    // timer, kept alive until the timer fires, seconds after the reply, which the collector then
    // has to move. Each of the store's commands already has its deadline (`bounded`), so the
    // calls' scripts go without; a shared client keeps its options for its other users.
    this.calls = client.withCommandOptions({ timeout: 0 });
    // Started now, so a claim rarely waits for it; a failure is retried by the first claim.
    this.ensureStarted().catch(() => {});
    this.checks = setInterval(() => void this.recheck(), settings.environmentCheckMs);
    // A store nobody closed must not keep the process alive.
    this.checks.unref();
  }

  /**
   * Resolves once the store has read Redis' eviction policy and armed its marker; rejects with a
   * `RedisEnvironmentError` (one line: the setting and the fix) if it cannot be safe on this
   * Redis, or a `StoreUnavailableError` if Redis did not answer. `connect` and `connectCluster`
   * await it; a store made on a client of yours should be awaited before it serves (a claim
   * waits for it too, and fails closed with the same line).
   */
  async ready(): Promise<void> {
    try {
      await this.ensureStarted();
    } catch (error) {
      // Full: the store starts, and answers `full` until Redis has room for its marker.
      if (!isOutOfMemory(error)) throw new StoreUnavailableError(error);
    }
    if (this.refusal) throw new RedisEnvironmentError(this.refusal);
  }

  // No global `maxRecords` here, and never `full` from a count: counting every record would
  // cost a round trip. The global cap on a Redis store is the operator's `maxmemory`, with the
  // default `maxmemory-policy noeviction`: at the limit Redis refuses writes, reported below as
  // `full` (replays too, since a claim is a write), instead of evicting a live record whose
  // retry would then execute a second time. Each caller's quota is counted in the claim itself.
  async claim(id: RecordId, fingerprint: Fingerprint, leaseMs: number, continuation = false): Promise<Claim> {
    const lease = milliseconds(leaseMs);
    if (!this.started) {
      try {
        await this.ensureStarted();
      } catch (error) {
        if (isOutOfMemory(error)) return { state: 'full' };
        throw new StoreUnavailableError(error);
      }
    }
    if (this.refusal) throw new StoreUnavailableError(new RedisEnvironmentError(this.refusal));
    const token = randomUUID();
    const command = CLAIM.run(this.calls, {
      keys: this.keysOf(id),
      arguments: [
        inProgressValue(fingerprint, token),
        String(lease),
        String(this.maxRecordsPerScope),
        String(this.maxBytesPerScope),
        continuation ? awaitingInputPrefix(fingerprint) : '',
        token,
      ],
    });
    let reply: unknown;
    try {
      reply = await this.bounded(command);
    } catch (error) {
      if (isOutOfMemory(error)) return { state: 'full' };
      // Fail closed: the caller hears "nothing executed, retry with the same key". But a command
      // that timed out is still queued, and Redis runs it once it answers again (a stall, a slow
      // fork): its claim would then hold the key, and a slot of the caller's quota, for a whole
      // lease that nobody is running, and every retry would meet it in progress. So the claim is
      // undone as soon as its late reply says it was made.
      void this.undoLateClaim(command, { ...id, fingerprint, token }, lease);
      throw new StoreUnavailableError(error);
    }
    return this.claimFrom(reply, { ...id, fingerprint, token }, lease);
  }

  /** What a claim script's reply means, for the claim `ticket` describes. */
  private claimFrom(reply: unknown, ticket: ClaimTicket, lease: number): Claim {
    const [answer, holder, expiresAt, resumedEpoch] = Array.isArray(reply) ? reply : [];
    if (answer === 'claimed' && typeof holder === 'string') {
      const held: Held = { epoch: holder };
      return { state: 'claimed', ticket: { ...ticket, resumed: held } };
    }
    if (
      answer === 'resumed' &&
      typeof holder === 'string' &&
      typeof expiresAt === 'number' &&
      typeof resumedEpoch === 'string'
    ) {
      const held: Held = { epoch: resumedEpoch, value: holder, expiresAt };
      return { state: 'claimed', ticket: { ...ticket, resumed: held } };
    }
    if (answer === 'quota') return { state: 'quotaExceeded' };
    if (answer === 'lost' && typeof holder === 'number') {
      const error = new RedisEnvironmentError(lostData(holder, holder + lease));
      if (this.lostReported !== holder) this.onError?.(error);
      this.lostReported = holder;
      throw new StoreUnavailableError(error);
    }
    if (answer === 'held' && typeof holder === 'string') return claimOf(holder);
    throw new StoreUnavailableError(new Error(`unexpected answer to a claim: ${JSON.stringify(reply)}`));
  }

  /**
   * Releases the claim a timed-out command made after all (putting back the awaiting-input record
   * a continuation took over), by the claim's own token: if the key has moved on, nothing changes.
   * Should the reply never come (the connection dropped), the lease still frees the key.
   */
  private async undoLateClaim(command: Promise<unknown>, ticket: ClaimTicket, lease: number): Promise<void> {
    try {
      const claim = this.claimFrom(await command, ticket, lease);
      if (claim.state === 'claimed') await this.release(claim.ticket);
    } catch {
      // No claim was made, or Redis is gone again: the lease is the last resort.
    }
  }

  complete(ticket: ClaimTicket, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return this.settle(ticket, 'completed', response, retentionMs);
  }

  awaitInput(ticket: ClaimTicket, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return this.settle(ticket, 'awaitingInput', response, retentionMs);
  }

  async release(ticket: ClaimTicket): Promise<boolean> {
    const resumed = heldOf(ticket);
    try {
      const released = await this.bounded(
        RELEASE.run(this.calls, {
          keys: this.keysOf(ticket),
          arguments: [
            inProgressValue(ticket.fingerprint, ticket.token),
            resumed.value ?? '',
            String(resumed.expiresAt ?? 0),
          ],
        }),
      );
      return released === 1;
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
  }

  async renew(ticket: ClaimTicket, leaseMs: number): Promise<boolean> {
    const lease = milliseconds(leaseMs);
    try {
      const renewed = await this.bounded(
        RENEW.run(this.calls, {
          keys: this.keysOf(ticket),
          arguments: [
            inProgressValue(ticket.fingerprint, ticket.token),
            String(lease),
            heldOf(ticket).epoch,
            ticket.token,
          ],
        }),
      );
      return renewed === 1;
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
  }

  /**
   * Deletes this store's keys only (SCAN + UNLINK): the Redis may hold other data, so never
   * FLUSHALL. A SCAN sees one node's keys, so on a cluster every master is scanned in turn.
   */
  async clear(): Promise<void> {
    const match = `${escapeGlob(this.keyPrefix)}*`;
    // Not the markers: a reset forgets the records, it does not mean Redis lost them.
    const isMarker = (key: string) =>
      key.startsWith(this.keyPrefix) && /^(\{[^}]*\})?alive$/.test(key.slice(this.keyPrefix.length));
    try {
      for (const node of await this.bounded(this.nodes())) {
        let cursor = '0';
        do {
          const page = await this.bounded(node.scan(cursor, { MATCH: match, COUNT: 1000 }));
          // One UNLINK per key, sent together: a cluster node refuses one UNLINK of keys in
          // different slots (CROSSSLOT), and a page holds many scopes' keys.
          const keys = page.keys.filter((key) => !isMarker(key));
          await this.bounded(Promise.all(keys.map((key) => node.unlink(key))));
          cursor = page.cursor;
        } while (cursor !== '0');
      }
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
  }

  /** Closes the client if `connect` made it; a shared client is its owner's to close. */
  async close(): Promise<void> {
    clearInterval(this.checks);
    if (this.ownsClient) await closeRedis(this.client);
  }

  /** Replaces the claim with a completed or awaiting-input record, kept for `retentionMs`. */
  private async settle(
    ticket: ClaimTicket,
    state: StoredValue['state'],
    response: StoredResponse,
    retentionMs: number,
  ): Promise<boolean> {
    const retention = milliseconds(retentionMs);
    const json = JSON.stringify(response);
    try {
      // The script answers 1 when it replaced the claim, nil when the key had moved on.
      const replaced = await this.bounded(
        COMPLETE.run(this.calls, {
          keys: this.keysOf(ticket),
          arguments: [
            inProgressValue(ticket.fingerprint, ticket.token),
            storedValue(state, ticket.fingerprint, json),
            String(retention),
            String(json.length),
            heldOf(ticket).epoch,
            ticket.token,
          ],
        }),
      );
      return replaced !== null;
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
  }

  /**
   * Fails the call once `commandTimeoutMs` has passed without a reply. node-redis' own
   * `timeout` command option cannot do this: it only covers a command still waiting to be
   * written, and is dropped once the command is on the socket (commands-queue.js,
   * `commandsToWrite`), so a command sent to a frozen Redis would wait forever. The
   * reply, if it ever comes, is matched to the abandoned command and ignored.
   */
  private bounded<T>(command: Promise<T>): Promise<T> {
    return withDeadline(command, this.commandTimeoutMs, 'Redis');
  }

  /**
   * The bound on what the store asks once it starts, and on each check after: reading every
   * master's policy, and arming a cluster's 16384 markers, is no call's command, and may take
   * longer than one (the connect timeout's default, at least).
   */
  private boundedStart<T>(command: Promise<T>): Promise<T> {
    return withDeadline(command, Math.max(this.commandTimeoutMs, DEFAULT_REDIS_CONNECT_TIMEOUT_MS), 'Redis');
  }

  // --- The environment: the facts "once" rests on, checked at start and while running ---

  private ensureStarted(): Promise<void> {
    if (this.started) return Promise.resolve();
    this.starting ??= this.start().finally(() => {
      this.starting = undefined;
    });
    return this.starting;
  }

  /**
   * Reads the eviction policy of every master, then arms the markers (see MARKER in scripts.ts),
   * and has every master keep the scripts, so that no call's first EVALSHA meets NOSCRIPT.
   */
  private async start(): Promise<void> {
    await this.checkEnvironment();
    await this.armMarkers();
    await this.loadScripts();
    this.started = true;
  }

  /** SCRIPT LOAD of each script on every master; one refused (an ACL) is sent whole when first run. */
  private async loadScripts(): Promise<void> {
    const loads = (await this.boundedStart(this.nodes())).flatMap((node) =>
      SCRIPTS.map((script) => script.loadInto(node)),
    );
    await this.boundedStart(Promise.all(loads));
  }

  /** Sets `refusal` from what every master says now; rejects only if a master does not answer. */
  private async checkEnvironment(): Promise<void> {
    const refusals: string[] = [];
    for (const { client, address } of await this.boundedStart(this.addressedNodes())) {
      const refusal = refusalOf(await this.boundedStart(evictionOf(client)), address, this.maxmemoryPolicy);
      if (refusal) refusals.push(refusal);
    }
    const [refusal] = refusals;
    if (refusal && refusal !== this.refusal) this.onError?.(new RedisEnvironmentError(refusal));
    this.refusal = refusal;
  }

  /** The periodic check: a Redis that cannot be asked now is already failing calls closed. */
  private async recheck(): Promise<void> {
    if (!this.client.isOpen) {
      clearInterval(this.checks);
      return;
    }
    if (this.started) await this.checkEnvironment().catch(() => {});
  }

  /**
   * Writes the markers that do not exist yet, one script per node: the one of a single Redis, or,
   * on a cluster, each master's share of the 16384 slots' (a slot that moved meanwhile is armed
   * by the node that has it now, key by key).
   */
  private async armMarkers(): Promise<void> {
    const epoch = randomUUID();
    const client = this.client;
    if (!('masters' in client)) {
      await this.boundedStart(client.eval(ARM_SCRIPT, { keys: [this.marker], arguments: [epoch] }));
      return;
    }
    const bySlot = client.slots;
    await this.boundedStart(
      Promise.all(
        client.masters.map(async (master) => {
          const keys: string[] = [];
          bySlot.forEach((shard, slot) => {
            if (shard.master.address === master.address) keys.push(markerOfSlot(this.keyPrefix, slot));
          });
          try {
            await (await client.nodeClient(master)).eval(ARM_SCRIPT, { arguments: [epoch, ...keys] });
          } catch (error) {
            if (!(error instanceof ErrorReply) || isOutOfMemory(error)) throw error;
            // The slot map changed under us (a slot moved): each key to the node that has it.
            await Promise.all(keys.map((key) => client.set(key, epoch, { NX: true })));
          }
        }),
      ),
    );
  }

  /** The connections that hold the keys, each with its address for a message. */
  private async addressedNodes(): Promise<Array<{ client: RedisClientType; address: string }>> {
    const client = this.client;
    if (!('masters' in client)) return [{ client, address: addressOf(client) }];
    return Promise.all(
      client.masters.map(async (master) => ({
        client: await client.nodeClient(master),
        address: master.address,
      })),
    );
  }

  /** The record's key, then its scope's index and sizes, then its marker (see the scripts). */
  private keysOf(id: RecordId): [string, string, string, string] {
    const keys = redisKeysOf(this.keyPrefix, id);
    return [...keys, this.markerOf(keys[0])];
  }

  /** The marker beside `recordKey`: the one of a single Redis, or its hash slot's on a cluster. */
  private markerOf(recordKey: string): string {
    if (!this.isCluster) return this.marker;
    const tag = recordKey.slice(this.keyPrefix.length + 1, recordKey.indexOf('}', this.keyPrefix.length));
    return markerOfSlot(this.keyPrefix, hashSlot(tag));
  }

  private get isCluster(): boolean {
    return 'masters' in this.client;
  }

  /** The marker of a single Redis. */
  private get marker(): string {
    return `${this.keyPrefix}alive`;
  }

  /** The connections that hold the keys: the one Redis, or each master of a cluster. */
  private async nodes(): Promise<RedisClientType[]> {
    const client = this.client;
    if (!('masters' in client)) return [client];
    return Promise.all(client.masters.map((master) => client.nodeClient(master)));
  }
}

// --- Whether a Redis may evict the records ---
//
// Redis evicts only past a `maxmemory` it has: with `maxmemory 0` (no bound; the default of a
// 64-bit build) no policy ever evicts (`getMaxmemoryState` in Redis' evict.c returns OK at once),
// and a full Redis under `noeviction` refuses writes instead, which the store answers `full`.
// Every other policy can evict a record: `allkeys-*` any key, `volatile-*` any key with a TTL,
// and every key this store writes has one, the lease or the retention. So the store runs only on
// `noeviction`, or on `maxmemory 0`, and reads which it is: `INFO memory` first (managed services
// that rename CONFIG away still answer INFO), then `CONFIG GET`. A replica ignores `maxmemory`
// (`replica-ignore-maxmemory`, its default); what counts is the master's, read on each master.

interface Eviction {
  policy: string;
  maxmemory: number;
}

/** The policy and bound a node reports, or undefined if it answers neither INFO nor CONFIG GET. */
async function evictionOf(node: RedisClientType): Promise<Eviction | undefined> {
  try {
    const info = String(await node.sendCommand(['INFO', 'memory']));
    const policy = /^maxmemory_policy:(\S+)/m.exec(info)?.[1];
    const maxmemory = /^maxmemory:(\d+)/m.exec(info)?.[1];
    if (policy && maxmemory) return { policy, maxmemory: Number(maxmemory) };
  } catch (error) {
    // Refused (renamed away, an ACL, a proxy that does not pass it): try CONFIG GET.
    if (!(error instanceof ErrorReply)) throw error;
  }
  try {
    const reply = await node.sendCommand(['CONFIG', 'GET', 'maxmemory-policy', 'maxmemory']);
    const pairs = Array.isArray(reply) ? reply.map(String) : [];
    const setting = (name: string) => {
      const at = pairs.indexOf(name);
      return at >= 0 && at % 2 === 0 ? pairs[at + 1] : undefined;
    };
    const [policy, maxmemory] = [setting('maxmemory-policy'), setting('maxmemory')];
    if (policy && maxmemory) return { policy, maxmemory: Number(maxmemory) };
  } catch (error) {
    if (!(error instanceof ErrorReply)) throw error;
  }
  return undefined;
}

/** Why the store cannot be safe on the node at `address`, in one line; undefined if it can. */
function refusalOf(
  eviction: Eviction | undefined,
  address: string,
  stated: string | undefined,
): string | undefined {
  if (!eviction) {
    if (stated === 'noeviction') return undefined;
    return (
      `cannot read maxmemory-policy from Redis at ${address} (INFO and CONFIG GET are refused), so cannot ` +
      "tell whether it evicts this store's records; set maxmemory-policy noeviction and state it with the " +
      "store option maxmemoryPolicy: 'noeviction', or let this user run INFO"
    );
  }
  const { policy, maxmemory } = eviction;
  if (policy === 'noeviction' || maxmemory === 0) return undefined;
  return (
    `Redis at ${address} may evict this store's records: maxmemory-policy is ${policy} with maxmemory ` +
    `${maxmemory}, so a retry whose record was evicted would execute again; set maxmemory-policy ` +
    'noeviction (or maxmemory 0)'
  );
}

/** The line a claim is refused with while the data is known lost, from `since` (Redis' ms) to `until`. */
function lostData(since: number, until: number): string {
  return (
    `Redis lost this store's records (a restart without persistence, FLUSHALL/FLUSHDB, a failover) at ` +
    `${new Date(since).toISOString()}: a call may still run on another instance, so new keys fail closed ` +
    `until ${new Date(until).toISOString()} (one lease); run Redis with persistence (appendonly yes, ` +
    'appendfsync always) and replicas acknowledging writes'
  );
}

/** `host:port` of a single Redis client, for a message. */
function addressOf(client: RedisClientType): string {
  const { url, socket } = client.options ?? {};
  if (url) return new URL(url).host;
  const { host, port } = (socket ?? {}) as { host?: string; port?: number };
  return `${host ?? 'localhost'}:${port ?? 6379}`;
}

/** The options with their defaults, each checked: what the store keeps. */
function settingsOf(
  options: RedisStoreOptions,
): Required<Omit<RedisStoreOptions, 'maxmemoryPolicy'>> & Pick<RedisStoreOptions, 'maxmemoryPolicy'> {
  const keyPrefix = options.keyPrefix ?? DEFAULT_REDIS_KEY_PREFIX;
  // A brace in the prefix would be read as (part of) every key's hash tag: see `redisKeysOf`.
  if (/[{}]/.test(keyPrefix)) {
    throw new RangeError(`a Redis key prefix must not contain { or }: "${keyPrefix}"`);
  }
  return {
    keyPrefix,
    commandTimeoutMs: positiveInteger(
      'commandTimeoutMs',
      options.commandTimeoutMs ?? DEFAULT_REDIS_COMMAND_TIMEOUT_MS,
    ),
    environmentCheckMs: positiveInteger(
      'environmentCheckMs',
      options.environmentCheckMs ?? DEFAULT_REDIS_ENVIRONMENT_CHECK_MS,
    ),
    maxmemoryPolicy: options.maxmemoryPolicy,
    ...scopeQuotasOf(options),
  };
}

// --- Key names, and why one scope's keys share a hash slot ---
//
// A Redis Cluster runs a script only if every key it names lives in one hash slot (else
// CROSSSLOT), and the scripts above name a record and its scope's index and sizes. So each of
// the three keys carries the same hash tag, right after the prefix: Redis hashes only the text
// between a key's first `{` and the next `}`. The tag is a digest of the scope, never the
// scope's own text, which could hold a `}` of its own and end the tag inside it: base64url has
// no braces, so the tag is exactly those characters for every scope. A prefix may not contain
// braces either (the constructor refuses one): a `{` in it would start the tag there instead.
// The full scope still follows the tag, so two scopes whose digests collide only share a slot.
// The cost: all of one caller's records live on one master. A cluster spreads callers, not
// the keys of one caller; that is what lets a claim count the caller's quota atomically.

/** Characters of the digest kept as the tag: 48 bits, plenty to spread scopes over 16384 slots. */
const SLOT_TAG_LENGTH = 8;

/**
 * Each scope's tag, once digested: a caller's claim and its record name the same keys, and a
 * server meets the same callers again and again. Forgotten whole past this many scopes, so a
 * stream of new callers holds no more than that.
 */
const tags = new Map<string, string>();
const MAX_REMEMBERED_TAGS = 10_000;

function tagOf(scope: string): string {
  let tag = tags.get(scope);
  if (tag === undefined) {
    if (tags.size >= MAX_REMEMBERED_TAGS) tags.clear();
    tag = createHash('sha256').update(scope).digest('base64url').slice(0, SLOT_TAG_LENGTH);
    tags.set(scope, tag);
  }
  return tag;
}

/** The record's key, then its scope's index and sizes: `prefix{tag}…`, one hash slot. */
export function redisKeysOf(keyPrefix: string, id: RecordId): [string, string, string] {
  const tag = tagOf(id.scope);
  const tagged = `${keyPrefix}{${tag}}`;
  // JSON keeps (scope, key) pairs distinct whatever characters either contains.
  const record = tagged + JSON.stringify([id.scope, id.idempotencyKey]);
  const scope = `${tagged}scope:${JSON.stringify(id.scope)}`;
  return [record, `${scope}:records`, `${scope}:bytes`];
}

// A slot's marker needs a key in that slot, so a hash tag that hashes to it: `prefix{t}alive`,
// `t` the first name (in base 36: 0, 1, …, z, 10, …) whose CRC16 falls in the slot, found once
// for all 16384 slots (about 170,000 digests, a few milliseconds) the first time a cluster asks.

let slotTags: string[] | undefined;

/** The marker of hash slot `slot` (see MARKER in scripts.ts). */
export function markerOfSlot(keyPrefix: string, slot: number): string {
  if (!slotTags) {
    const tags: string[] = new Array(HASH_SLOTS);
    for (let n = 0, found = 0; found < HASH_SLOTS; n++) {
      const tag = n.toString(36);
      const at = hashSlot(tag);
      if (tags[at] === undefined) {
        tags[at] = tag;
        found++;
      }
    }
    slotTags = tags;
  }
  return `${keyPrefix}{${slotTags[slot]}}alive`;
}

const HASH_SLOTS = 16_384;

/** Redis Cluster's hash slot of a hash tag, ASCII as every tag here is: CRC16 (XMODEM) mod 16384. */
export function hashSlot(tag: string): number {
  let crc = 0;
  for (let i = 0; i < tag.length; i++) {
    crc ^= tag.charCodeAt(i) << 8;
    for (let bit = 0; bit < 8; bit++)
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % HASH_SLOTS;
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
    await withDeadline<unknown>(client.close(), graceMs, 'Redis');
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

/** A completed record, or an awaiting-input one: a response kept under its fingerprint. */
interface StoredValue {
  state: 'completed' | 'awaitingInput';
  fingerprint: Fingerprint;
  response: StoredResponse;
}

/**
 * The store's own part of a ticket (`ClaimTicket.resumed`): the marker's epoch when the claim was
 * made, and what a continuation's claim took over (the awaiting-input record as stored, and its
 * expiry in Redis' clock).
 */
interface Held {
  epoch: string;
  value?: string;
  expiresAt?: number;
}

function heldOf(ticket: ClaimTicket): Held {
  const held = ticket.resumed;
  return isPlainObject(held) && typeof held.epoch === 'string' ? (held as unknown as Held) : { epoch: '' };
}

// Deterministic: `complete` rebuilds these exact bytes from its ticket to recognise its claim.
function inProgressValue(fingerprint: Fingerprint, token: string): string {
  const value: InProgressValue = { state: 'inProgress', fingerprint, token };
  return JSON.stringify(value);
}

// Written by hand, members in this order, so the claim script can tell an awaiting-input record
// of one fingerprint by how it begins (`awaitingInputPrefix`) without parsing it.
function storedValue(state: StoredValue['state'], fingerprint: Fingerprint, responseJson: string): string {
  return `${storedValuePrefix(state, fingerprint)}"response":${responseJson}}`;
}

function storedValuePrefix(state: StoredValue['state'], fingerprint: Fingerprint): string {
  return `{"state":${JSON.stringify(state)},"fingerprint":${JSON.stringify(fingerprint)},`;
}

function awaitingInputPrefix(fingerprint: Fingerprint): string {
  return storedValuePrefix('awaitingInput', fingerprint);
}

/** The answer for a key someone else holds (see `claimOfHeld`): its value is the record as JSON. */
function claimOf(raw: string): Claim {
  const value = parsedJson(raw);
  return claimOfHeld(isPlainObject(value) ? value : {}, raw);
}

/** Redis refused a write because `maxmemory` is reached under `noeviction`. */
function isOutOfMemory(error: unknown): boolean {
  return error instanceof ErrorReply && error.message.startsWith('OOM');
}

/** SCAN MATCH is a glob: a prefix containing `*`, `?`, `[` or `\` must match only itself. */
function escapeGlob(literal: string): string {
  return literal.replace(/[*?[\]\\]/g, '\\$&');
}
