// --- The SQL of the SQLite store: its schema, its migrations, and every statement it runs ---
//
// Plain SQL, created at open or migrated from an older schema (file.ts). The tables are named
// `sep3182_idem_*`, so the file may hold a server's own tables too.
// Internal to the package: the SQLite store's own.

/** The schema version this store writes, and reads. */
export const SCHEMA_VERSION = 2;

/** How many records a sweep looks at (store.ts: every SWEEP_EVERY claims that write). */
export const SWEEP_ROWS = 256;

// --- The schema ---
//
// One row per (scope, idempotency_key), the key's state in `state`:
//   inProgress     a claim whose call runs: `token` (unique per claim), its holder process
//                  (`holder_pid`, `holder_started`, `holder_host`; NULL once its store closed),
//                  `expires_at` (the lease), and `holder_lease_until`, the same lease on the
//                  holder machine's monotonic clock (NULL where it has none; store.ts says why). A continuation's claim keeps the awaiting-input
//                  record it took over in `response`, `bytes` and `resumed_until`, for `release`.
//   awaitingInput  a round answered `input_required`: `response` is that answer.
//   completed      the final response, replayed to every retry until `expires_at` (retention);
//                  with `response` NULL, one that could not be kept under the file's size bound:
//                  the key answers `full` until then, and never executes again to the same end.
// `response` is the JSON text exactly as the dispatch answered; `bytes` its length in characters,
// counted against the caller's quota. Times are ms since the epoch. A row whose `expires_at` has
// passed is as good as absent: every statement below ignores it.
// WITHOUT ROWID: the table is its primary key's B-tree, so a claim writes one page, not a table
// page and an index page. There is no index on the expiry, which every write would move: a
// caller's expired rows are found by its quota (`usage.next_expiry`), the rest by the sweep.
// `usage` is what each scope's rows add up to, expired or not, kept by every write: a claim reads
// its caller's quota from one row, however many records the caller holds. `next_expiry` is a lower
// bound of its rows' expiries: until then, none of them can have expired, and a caller at its
// quota is refused without counting. `schema` holds the version, and how many times the file was
// cleared: a process that remembers replays (in-process.ts) forgets them when that changes.
const SCHEMA = `
CREATE TABLE sep3182_idem_records (
  scope           TEXT    NOT NULL,
  idempotency_key TEXT    NOT NULL,
  state           TEXT    NOT NULL CHECK (state IN ('inProgress', 'awaitingInput', 'completed')),
  fingerprint     TEXT    NOT NULL,
  response        TEXT,
  bytes           INTEGER NOT NULL DEFAULT 0,
  expires_at      INTEGER NOT NULL,
  token           TEXT,
  holder_pid      INTEGER,
  holder_started  TEXT,
  holder_host     TEXT,
  resumed_until   INTEGER,
  PRIMARY KEY (scope, idempotency_key)
) WITHOUT ROWID;
CREATE TABLE sep3182_idem_usage (
  scope       TEXT    PRIMARY KEY,
  records     INTEGER NOT NULL,
  bytes       INTEGER NOT NULL,
  next_expiry INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE sep3182_idem_schema (version INTEGER NOT NULL, clears INTEGER NOT NULL DEFAULT 0);
INSERT INTO sep3182_idem_schema (version) VALUES (0);`;

/**
 * SQL that brings a file's schema from version i to version i + 1. One entry so far; a later
 * schema appends its own, and a file of any older schema is brought up to date at open.
 */
export const MIGRATIONS: readonly string[] = [
  SCHEMA,
  // 2: a claim's lease on its machine's monotonic clock too, which no wall-clock step moves.
  'ALTER TABLE sep3182_idem_records ADD COLUMN holder_lease_until INTEGER',
];

// Each statement that settles a claim changes the row only while it still holds that exact live
// claim: a claim that lost its key (its lease ran out, or the key was taken over) changes nothing.
// ? scope, key, token, now, the monotonic clock (NULL where there is none): the lease is live by
// either clock, so a wall-clock step forward does not take a running call's claim from it.
const MINE = `scope = ? AND idempotency_key = ? AND token = ? AND state = 'inProgress'
  AND (expires_at > ? OR holder_lease_until > ?)`;

// ? now, this machine's host (liveness.ts), its monotonic clock: a row past its expiry, but for
// the claim of a holder on this machine whose lease, on the monotonic clock, still runs.
const EXPIRED = `expires_at <= ?
  AND NOT (state = 'inProgress' AND holder_host IS ? AND coalesce(holder_lease_until > ?, 0))`;

export const SQL = {
  find: `SELECT state, fingerprint, response, bytes, expires_at, holder_pid, holder_started, holder_host,
      holder_lease_until FROM sep3182_idem_records WHERE scope = ? AND idempotency_key = ?`,
  usage: 'SELECT records, bytes, next_expiry FROM sep3182_idem_usage WHERE scope = ?',
  // ? scope, key, fingerprint, expires_at, token, holder pid, started, host, lease on the monotonic clock
  claim: `INSERT INTO sep3182_idem_records (scope, idempotency_key, state, fingerprint, expires_at, token,
      holder_pid, holder_started, holder_host, holder_lease_until)
    VALUES (?, ?, 'inProgress', ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (scope, idempotency_key) DO UPDATE SET state = 'inProgress', fingerprint = excluded.fingerprint,
      response = NULL, bytes = 0, expires_at = excluded.expires_at, token = excluded.token,
      holder_pid = excluded.holder_pid, holder_started = excluded.holder_started,
      holder_host = excluded.holder_host, holder_lease_until = excluded.holder_lease_until, resumed_until = NULL`,
  // ? token, expires_at, holder pid, started, host, monotonic lease, scope, key: the row keeps its
  // response and size, for release.
  resume: `UPDATE sep3182_idem_records SET state = 'inProgress', token = ?, resumed_until = expires_at,
      expires_at = ?, holder_pid = ?, holder_started = ?, holder_host = ?, holder_lease_until = ?
    WHERE scope = ? AND idempotency_key = ?`,
  // ? scope, records, bytes, next expiry: added to what the scope holds.
  count: `INSERT INTO sep3182_idem_usage (scope, records, bytes, next_expiry) VALUES (?, ?, ?, ?)
    ON CONFLICT (scope) DO UPDATE SET records = records + excluded.records, bytes = bytes + excluded.bytes,
      next_expiry = min(next_expiry, excluded.next_expiry)`,
  // ? records, bytes (negative), scope: what a row that goes took.
  uncount: 'UPDATE sep3182_idem_usage SET records = records + ?, bytes = bytes + ? WHERE scope = ?',
  forgetEmpty: 'DELETE FROM sep3182_idem_usage WHERE scope = ? AND records <= 0',
  mine: `SELECT bytes, resumed_until FROM sep3182_idem_records WHERE ${MINE}`,
  // ? state, response, bytes, expires_at, then MINE's.
  settle: `UPDATE sep3182_idem_records SET state = ?, response = ?, bytes = ?, expires_at = ?, token = NULL,
      holder_pid = NULL, holder_started = NULL, holder_host = NULL, holder_lease_until = NULL,
      resumed_until = NULL
    WHERE ${MINE}`,
  // ? expires_at, then MINE's: a completed record with no response (too large for the file's bound).
  markFull: `UPDATE sep3182_idem_records SET state = 'completed', response = NULL, bytes = 0, expires_at = ?,
      token = NULL, holder_pid = NULL, holder_started = NULL, holder_host = NULL, holder_lease_until = NULL,
      resumed_until = NULL
    WHERE ${MINE}`,
  release: `DELETE FROM sep3182_idem_records WHERE ${MINE}`,
  putBack: `UPDATE sep3182_idem_records SET state = 'awaitingInput', expires_at = resumed_until, token = NULL,
      holder_pid = NULL, holder_started = NULL, holder_host = NULL, holder_lease_until = NULL,
      resumed_until = NULL
    WHERE ${MINE}`,
  // ? expires_at, holder pid, started, host, monotonic lease, then MINE's.
  renew: `UPDATE sep3182_idem_records SET expires_at = ?, holder_pid = ?, holder_started = ?, holder_host = ?,
      holder_lease_until = ?
    WHERE ${MINE}`,
  // The caller's expired rows (? scope, key, then EXPIRED's), but for the key being claimed (its
  // own row is replaced instead).
  pruneScope: `DELETE FROM sep3182_idem_records WHERE scope = ? AND idempotency_key <> ? AND ${EXPIRED}`,
  recount: `SELECT count(*) AS records, coalesce(sum(bytes), 0) AS bytes, min(expires_at) AS next_expiry
    FROM sep3182_idem_records WHERE scope = ?`,
  setUsage: 'UPDATE sep3182_idem_usage SET records = ?, bytes = ?, next_expiry = ? WHERE scope = ?',
  // ? the last record swept (scope, key), then EXPIRED's: of the next SWEEP_ROWS records, the
  // expired ones (only those become rows here: most sweeps answer none), and where the next sweep
  // goes on from.
  sweep: `SELECT scope, idempotency_key, bytes FROM (SELECT scope, idempotency_key, bytes, expires_at, state,
        holder_host, holder_lease_until
      FROM sep3182_idem_records WHERE (scope, idempotency_key) > (?, ?)
      ORDER BY scope, idempotency_key LIMIT ${SWEEP_ROWS}) WHERE ${EXPIRED}`,
  sweptTo: `SELECT scope, idempotency_key FROM sep3182_idem_records WHERE (scope, idempotency_key) > (?, ?)
    ORDER BY scope, idempotency_key LIMIT 1 OFFSET ${SWEEP_ROWS - 1}`,
  sweepOne: `DELETE FROM sep3182_idem_records WHERE scope = ? AND idempotency_key = ? AND ${EXPIRED}`,
  orphan: `UPDATE sep3182_idem_records SET holder_pid = NULL, holder_started = NULL, holder_host = NULL,
      holder_lease_until = NULL WHERE token = ? AND state = 'inProgress'`,
};
