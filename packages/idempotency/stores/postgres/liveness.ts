// --- A store instance's liveness: a lock its sessions hold for as long as its process runs ---
//
// Every claim is stamped with its store instance's liveness lock, a random 64-bit advisory lock
// key, and with the start time of the Postgres server it was written on (see `holder_alive` in
// `sql.ts`). Two dedicated sessions of the instance hold that lock, shared, for its whole life.
// A claim that finds an in-progress record tries the holder's lock exclusively: it gets it only
// once no session holds it, which is when the holder's process is gone, since Postgres ends the
// sessions of a process that died (its kernel closes their sockets) and their locks with them.
//
// Why a lock, and why two sessions: a session can end while its process lives (a DBA's
// `idle_session_timeout` or a script that terminates idle sessions, a pooler's
// `client_idle_timeout`, one connection broken). Were a claim stamped with its session's backend,
// its claims would look dead from then until a new session re-stamped them, and a retry in that
// gap would execute beside the running call. A lock names the instance, not a backend: the other
// session holds it meanwhile, and the one that ended reconnects and takes it again, with nothing
// to re-stamp. A claim is written only while some session holds its store's lock (the claim
// function checks), so no claim is ever born looking dead. And a lock, unlike the
// `backend_start` of `pg_stat_activity`, is seen alike by every role.
//
// Each session disables the server's idle timeouts for itself, and checks its identity every
// second as it runs (`SESSION_IDENTITY`): the same backend, still marked with the lock. A backend
// that changed under an open connection is a pooler handing the connection's statements to
// whichever server session is free (PgBouncer's transaction or statement pooling). There the lock
// sits on a server session that other clients use, where their claims' tries are granted by that
// session's own hold of it, and that the pooler closes when it likes (`server_lifetime`,
// `server_idle_timeout`, `RECONNECT`): every claim would look dead, for good. So the store refuses
// it, at connect (`probePooling`) and whenever a check or a claim (`SHARED_SESSION`) sees it.
//
// What the lock cannot see, stated in docs/scaling-out.md: every session of a live instance ending
// at once (a network cut of all its connections, its pooler restarted) leaves its running claims
// looking dead until a session reconnects; a vanished host is seen only when TCP keepalives give
// up; and a claim written before the server started (a restart, a failover) is judged by its
// lease alone.

import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { reconnectDelayMs, withDeadline } from '../support.js';
import { LIVENESS_SETTINGS, SESSION_IDENTITY, TAKE_LIVENESS_LOCK } from './sql.js';

/** How many sessions hold an instance's lock: one can end and reconnect while the other holds it. */
const LIVENESS_SESSIONS = 2;

/**
 * How often each liveness session checks its identity. A pooler that swapped its backend is
 * refused within about this long, and the session is never idle for longer, however short a
 * pooler's `client_idle_timeout`; two tiny statements a second per instance cost Postgres nothing.
 */
const IDENTITY_CHECK_INTERVAL_MS = 1_000;

/**
 * The store refuses this Postgres, or what stands between: the message is one line, naming the
 * setting and the fix.
 */
export class PostgresEnvironmentError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PostgresEnvironmentError';
  }
}

/** The line a store refuses a pooler that shares server sessions with; `where` is its host and port. */
function sharedSessions(where: string): PostgresEnvironmentError {
  return new PostgresEnvironmentError(
    `Postgres at ${where} shares its server sessions between clients, so the store cannot tell a ` +
      'live holder from a dead one: a pooler in transaction or statement pooling, or one that keeps ' +
      "a session for the next client without DISCARD ALL; set pool_mode = session for the store's " +
      'database or user (with server_reset_query = DISCARD ALL, the default), or connect to Postgres directly',
  );
}

/** What `SESSION_IDENTITY` (and, of it, `TAKE_LIVENESS_LOCK`) answers, unchecked. */
type Identity = { pid?: unknown; mark?: unknown };

interface Session {
  client: pg.Client | undefined;
  /** Its backend, as `pg_backend_pid()` said when it took the lock. */
  pid: number | undefined;
  /** The next identity check, or the next reconnect attempt. */
  timer: NodeJS.Timeout | undefined;
}

export interface LivenessOptions {
  /** How each session connects: the store's connection, with its own application name. */
  config: pg.ClientConfig;
  statementTimeoutMs: number;
  onError: (error: unknown) => void;
}

export class Liveness {
  /** The advisory lock key this instance's claims are stamped with, as decimal text. */
  readonly lock = randomLockKey();
  private readonly sessions: Session[] = Array.from({ length: LIVENESS_SESSIONS }, () => ({
    client: undefined,
    pid: undefined,
    timer: undefined,
  }));
  private refusal: PostgresEnvironmentError | undefined;
  private closing = false;
  /** Where the sessions connect (host and port, as the client resolved them), for the refusal. */
  private where = '';

  constructor(private readonly options: LivenessOptions) {}

  /**
   * Opens the sessions, each holding the lock, and refuses (rejects with a `PostgresEnvironmentError`)
   * a pooler that shares server sessions. `pool` is the store's own, whose sessions must be others.
   * On a rejection, or to give up on a start that takes too long, `close`.
   */
  async start(pool: pg.Pool): Promise<void> {
    await Promise.all(this.sessions.map((session) => this.open(session)));
    await this.probePooling(pool);
    for (const [i, session] of this.sessions.entries()) {
      // Staggered, so that the two sessions are never checked, nor idle, in step.
      this.checkLater(session, IDENTITY_CHECK_INTERVAL_MS * (1 + i / LIVENESS_SESSIONS));
    }
  }

  /** True while some session holds the lock: claims stamped with it are safe to write. */
  get held(): boolean {
    return this.sessions.some((session) => session.pid !== undefined);
  }

  /** Why every claim must be refused, once a pooler that shares server sessions has been seen. */
  get refused(): PostgresEnvironmentError | undefined {
    return this.refusal;
  }

  /** The backends of the sessions holding the lock now (for operators, with `pg_locks`, and tests). */
  get pids(): number[] {
    return this.sessions.flatMap((session) => (session.pid === undefined ? [] : [session.pid]));
  }

  /**
   * Records that server sessions are shared (a check or a claim saw it while running): the store
   * refuses from now on, and the operator's log hears it once.
   */
  refuse(): PostgresEnvironmentError {
    if (!this.refusal) {
      this.refusal = sharedSessions(this.where);
      this.options.onError(this.refusal);
      for (const session of this.sessions) clearTimeout(session.timer);
    }
    return this.refusal;
  }

  async close(): Promise<void> {
    this.closing = true;
    await Promise.all(
      this.sessions.map((session) => {
        clearTimeout(session.timer);
        const client = session.client;
        session.client = undefined;
        session.pid = undefined;
        return client?.end().catch(() => {});
      }),
    );
  }

  /** Connects `session`, sets it up and takes the lock with it. */
  private async open(session: Session): Promise<void> {
    const client = new pg.Client(this.options.config);
    client.on('error', this.options.onError);
    try {
      await client.connect();
      this.where = `${client.host}:${client.port}`;
      const timeout = String(this.options.statementTimeoutMs);
      await this.bounded(client.query(LIVENESS_SETTINGS, [timeout]));
      const { rows } = await this.bounded(client.query<Identity>(TAKE_LIVENESS_LOCK, [this.lock]));
      const pid: unknown = rows[0]?.pid;
      if (typeof pid !== 'number')
        throw new Error('Postgres did not say which backend took the liveness lock');
      if (this.closing) throw new Error('the store was closed');
      session.client = client;
      session.pid = pid;
      client.once('end', () => this.lost(session, client));
    } catch (error) {
      await client.end().catch(() => {});
      throw error;
    }
  }

  /**
   * At connect: a pooler that shares server sessions gives two of its clients' statements, one
   * after the other, the same backend, or one client's statements different backends, as soon as
   * more than one client is about; each statement below would see it. Two sessions of the store,
   * then its pool, then the sessions again: with no other client about, a pooler that reuses its
   * most recent server session first (PgBouncer's default) gives the second session or the pool
   * the first session's backend, and one that rotates them (`server_round_robin`) gives a
   * session another backend. Under other clients' load a sharing pooler may slip through here;
   * the checks as the store runs, and every claim, see it then.
   */
  private async probePooling(pool: pg.Pool): Promise<void> {
    const refusal = sharedSessions(this.where);
    const pids = this.pids;
    if (new Set(pids).size !== pids.length) throw refusal;
    for (const session of this.sessions) if (!(await this.unchanged(session))) throw refusal;
    const { rows } = await this.bounded(pool.query<Identity>(SESSION_IDENTITY));
    const [probe] = rows;
    if (probe?.mark !== '' || pids.some((pid) => pid === probe.pid)) throw refusal;
    for (const session of this.sessions) if (!(await this.unchanged(session))) throw refusal;
  }

  /**
   * Whether `session` still runs on the backend that took the lock, still marked with it (true
   * too if it was replaced meanwhile). Rejects if the statement fails: the session is lost.
   */
  private async unchanged(session: Session): Promise<boolean> {
    const client = session.client;
    if (!client) return true;
    const { rows } = await this.bounded(client.query<Identity>(SESSION_IDENTITY));
    const [identity] = rows;
    return session.client !== client || (identity?.pid === session.pid && identity?.mark === this.lock);
  }

  /** Checks `session`'s identity after `delayMs`, and again every interval while it holds. */
  private checkLater(session: Session, delayMs = IDENTITY_CHECK_INTERVAL_MS): void {
    if (this.closing || this.refusal) return;
    const client = session.client;
    session.timer = setTimeout(() => {
      this.unchanged(session).then(
        (unchanged) => {
          if (unchanged) this.checkLater(session);
          else this.refuse();
        },
        (error: unknown) => {
          if (this.refusal || this.closing) return;
          // The session did not answer: given up (its end reconnects it), while the other holds.
          this.options.onError(error);
          if (client) this.lost(session, client);
        },
      );
    }, delayMs);
    // The checks alone must not keep a server's process alive.
    session.timer.unref();
  }

  /** `client`, `session`'s connection, ended or was given up: reconnect it, with back-off. */
  private lost(session: Session, client: pg.Client): void {
    if (session.client !== client) return;
    session.client = undefined;
    session.pid = undefined;
    clearTimeout(session.timer);
    // A connection given up with its check unanswered is destroyed, not waited for.
    client.end().catch(() => {});
    this.reconnect(session, 0);
  }

  private reconnect(session: Session, attempt: number): void {
    if (this.closing || this.refusal) return;
    session.timer = setTimeout(() => {
      this.open(session).then(
        () => this.checkLater(session),
        (error: unknown) => {
          if (this.closing) return;
          this.options.onError(error);
          this.reconnect(session, attempt + 1);
        },
      );
    }, reconnectDelayMs(attempt));
    session.timer.unref();
  }

  private bounded<T>(query: Promise<T>): Promise<T> {
    return withDeadline(query, this.options.statementTimeoutMs, 'Postgres');
  }
}

/**
 * A random advisory lock key outside the 32-bit range: keys that small are what
 * `pg_advisory_lock(hashtext(…))` takes (the demo ledger's migration does), and this must meet
 * no other lock.
 */
function randomLockKey(): string {
  for (;;) {
    const key = randomBytes(8).readBigInt64BE();
    if (key > 2_147_483_647n || key < -2_147_483_648n) return key.toString();
  }
}
