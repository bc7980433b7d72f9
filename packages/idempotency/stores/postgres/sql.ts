// --- The Postgres store's SQL: its schema, its functions and the statements it sends ---
//
// What `store.ts` sends, kept apart from it so that the store reads as the contract and each
// statement can be read here as SQL. Everything is built under a table prefix, so tests and
// tenants do not collide.

/** Prefixes become parts of SQL identifiers (at most 63 bytes each): lower case, digits and `_` only. */
const TABLE_PREFIX_PATTERN = /^[a-z_][a-z0-9_]{0,39}$/;

/** SQLSTATE the settle function raises for a claim that lost its key (PL/pgSQL's no_data_found). */
export const CLAIM_LOST = 'P0002';

/**
 * SQLSTATE a claim raises when its own store's liveness lock is held by no session, so a claim
 * stamped with it would look dead at once (see `liveness.ts`). A class of its own, unused by Postgres.
 */
export const LIVENESS_NOT_HELD = 'SEP01';

/**
 * SQLSTATE a claim raises when it runs on a liveness session's backend: the server sessions are
 * shared between clients, as a transaction-pooling PgBouncer shares them (see `liveness.ts`).
 */
export const SHARED_SESSION = 'SEP02';

/** The session setting that marks a backend as a liveness session's; its value is the lock held. */
export const LIVENESS_MARK = 'sep3182.liveness';

// --- The schema ---
//
// One row per (scope, idempotency_key), the key's state in `state`:
//   inProgress     a claim whose call runs: `token` (unique per claim), `holder_lock` (its
//                  store's liveness lock) and `holder_epoch` (when the Postgres server it was
//                  written on started), `expires_at` (the lease).
//                  A continuation's claim keeps the awaiting-input record it took over in
//                  `response`, `bytes` and `resumed_until` (that record's own expiry), for `release`.
//   awaitingInput  a round answered `input_required`: `response` is that answer.
//   completed      the final response, replayed to every retry until `expires_at` (retention).
// `response` is the JSON text exactly as the dispatch answered (text, not jsonb, which would
// reorder members); `bytes` its length in characters, counted against the caller's quota.
// A row whose `expires_at` has passed is as good as absent: every statement below ignores it.
// Every deadline is set and compared by `statement_timestamp()`, never `now()`: inside a tool's
// transaction `now()` is the time of its BEGIN, so a record written at the end of a 2 s tool would
// expire 2 s early, or be born expired under a retention shorter than the tool, and its retry
// would execute again.

/** The SQL that creates (or, for the functions, updates) the store's schema under `tablePrefix`. */
export function migrationOf(tablePrefix: string): string {
  const p = checkedTablePrefix(tablePrefix);
  // Every statement that changes what a scope holds takes that scope's advisory lock first.
  const lockScope = (scope: string) => `PERFORM pg_advisory_xact_lock(hashtext('${p}'), hashtext(${scope}));`;
  // Before a claim is written, stamped with the caller's own liveness lock: if no session holds
  // that lock, the claim would look dead to every other instance at once, and its retry would
  // execute beside it. (A try that succeeds holds the lock until the raise rolls it back.)
  const checkOwnLock = `IF pg_try_advisory_xact_lock(p_holder_lock) THEN
        RAISE EXCEPTION 'no liveness session of this store holds its lock' USING ERRCODE = '${LIVENESS_NOT_HELD}';
      END IF;`;
  return `
CREATE TABLE IF NOT EXISTS ${p}records (
  scope           text        NOT NULL,
  idempotency_key text        NOT NULL,
  state           text        NOT NULL CHECK (state IN ('inProgress', 'awaitingInput', 'completed')),
  fingerprint     text        NOT NULL,
  response        text,
  bytes           bigint      NOT NULL DEFAULT 0,
  expires_at      timestamptz NOT NULL,
  token           uuid,
  holder_lock     bigint,
  holder_epoch    timestamptz,
  resumed_until   timestamptz,
  PRIMARY KEY (scope, idempotency_key)
);
-- The schema before the holder lock stamped a claim with its holder's backend (holder_pid,
-- holder_started) and had a claim function that read those. Its function goes, so an instance on
-- that schema still running fails its claims closed instead of reading the claims stamped here as dead; its
-- in-progress rows, with no lock, are left to their leases. Altered only when needed: ALTER TABLE
-- locks out every claim while it waits, and every instance runs this migration when it starts.
DROP FUNCTION IF EXISTS ${p}claim(text, text, text, uuid, bigint, boolean, integer, timestamptz, bigint, bigint);
DO $holder$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '${p}records'::regclass AND attname = 'holder_lock' AND NOT attisdropped) THEN
    ALTER TABLE ${p}records ADD COLUMN holder_lock bigint, ADD COLUMN holder_epoch timestamptz,
      DROP COLUMN IF EXISTS holder_pid, DROP COLUMN IF EXISTS holder_started;
  END IF;
END $holder$;
-- The primary key is the table's only index: the one a lookup needs, and all a claim writes. With
-- no index on expires_at, settling a claim (which moves its expiry) rewrites no index entry
-- either, and can be a heap-only update. The reaper finds expired rows by walking the table's
-- blocks instead (see reap). The schema before it pruned by these two; drop them once no instance
-- on that schema runs, which this migration assumes.
DROP INDEX IF EXISTS ${p}records_scope_expiry;
DROP INDEX IF EXISTS ${p}records_expiry;

-- What each scope's rows add up to, expired or not: its quota's count, read by a claim in one
-- lookup, where counting the rows cost a claim a scan of all its caller's records. Kept by every
-- function below, each under the scope's advisory lock, and by the reaper. Created with the counts of the rows already
-- there (a table made before this one existed); instances on that schema would not keep it.
DO $usage$ BEGIN
  IF to_regclass('${p}usage') IS NULL THEN
    CREATE TABLE ${p}usage (
      scope   text   PRIMARY KEY,
      records bigint NOT NULL,
      bytes   bigint NOT NULL
    );
    INSERT INTO ${p}usage SELECT scope, count(*), sum(bytes) FROM ${p}records GROUP BY scope;
  END IF;
END $usage$;

-- Adds to a scope's usage; a scope left with no rows has none.
CREATE OR REPLACE FUNCTION ${p}count(p_scope text, p_records bigint, p_bytes bigint)
RETURNS void
LANGUAGE plpgsql AS $count$
DECLARE
  left_records bigint;
BEGIN
  IF p_records = 0 AND p_bytes = 0 THEN RETURN; END IF;
  INSERT INTO ${p}usage AS u (scope, records, bytes) VALUES (p_scope, p_records, p_bytes)
    ON CONFLICT (scope) DO UPDATE SET records = u.records + EXCLUDED.records, bytes = u.bytes + EXCLUDED.bytes
    RETURNING u.records INTO left_records;
  IF left_records = 0 THEN DELETE FROM ${p}usage u WHERE u.scope = p_scope; END IF;
END
$count$;

-- Deletes expired rows of one scope, the oldest up to p_limit (all of them if NULL), and
-- uncounts them. The caller holds the scope's advisory lock. Waits for a row the reaper is
-- deleting, so the usage it leaves counts no row the reaper has taken.
CREATE OR REPLACE FUNCTION ${p}prune(p_scope text, p_limit integer)
RETURNS void
LANGUAGE plpgsql AS $prune$
DECLARE
  gone_records bigint;
  gone_bytes bigint;
BEGIN
  WITH gone AS (
    DELETE FROM ${p}records r WHERE r.ctid = ANY (ARRAY(
      SELECT e.ctid FROM ${p}records e WHERE e.scope = p_scope AND e.expires_at <= statement_timestamp()
      ORDER BY e.expires_at LIMIT p_limit FOR UPDATE))
    RETURNING r.bytes)
  SELECT count(*), coalesce(sum(gone.bytes), 0) INTO gone_records, gone_bytes FROM gone;
  PERFORM ${p}count(p_scope, -gone_records, -gone_bytes);
END
$prune$;

-- Whether the store instance that stamped a claim with (p_lock, p_epoch) still runs. Its liveness
-- sessions hold p_lock, shared, for as long as it runs: a try for it exclusively (held only to
-- the end of this statement's transaction) fails while any of them holds it, and succeeds once
-- Postgres has ended them all, as it does a dead process's. A lock is only evidence on the
-- server it was taken on: a claim written before this server started (a restart, or a failover
-- to a replica) is alive until its lease ends, whatever became of its holder.
CREATE OR REPLACE FUNCTION ${p}holder_alive(p_lock bigint, p_epoch timestamptz)
RETURNS boolean
LANGUAGE plpgsql AS $alive$
BEGIN
  IF p_lock IS NULL OR p_epoch IS DISTINCT FROM pg_postmaster_start_time() THEN RETURN true; END IF;
  RETURN NOT pg_try_advisory_xact_lock(p_lock);
END
$alive$;

-- It may not look it, but this is safe from races across any number of instances. Every claim of
-- a scope first takes that scope's transaction-level advisory lock, so claims of one scope run
-- one at a time: of N concurrent claims of one key exactly one finds it free, and the quota
-- counts what no other claim can add to meanwhile. Every other function that changes a scope's
-- rows or usage takes the same lock, so no live row is added or dropped behind a claim's back.
-- The reaper takes none: it deletes only rows that have expired, so the usage a claim reads
-- counts at least the caller's live rows, never fewer; and before a claim refuses for the quota
-- it deletes its caller's expired rows itself and reads again, so it refuses only on live rows.
-- A claim locks no other scope, so no two claims can each hold the lock the other waits for.
-- Renew takes no lock: it changes only a live claim's lease, and the FOR UPDATE row lock orders
-- it. Every lock ends with the statement's own transaction: nothing is held across a tool's call.
-- The claim prunes nothing in the common case: expired rows are the reaper's.
-- Answers (answer, fingerprint, response): 'claimed'; 'resumed' (a continuation took over an
-- awaiting-input record); 'quota'; or the live record's state, with its fingerprint and response.
CREATE OR REPLACE FUNCTION ${p}claim(
  p_scope text, p_key text, p_fingerprint text, p_token uuid, p_lease_ms bigint, p_continuation boolean,
  p_holder_lock bigint, p_max_records bigint, p_max_bytes bigint)
RETURNS TABLE (answer text, fingerprint text, response text)
LANGUAGE plpgsql AS $claim$
DECLARE
  held ${p}records%ROWTYPE;
  found_held boolean;
  live boolean;
  lease_end timestamptz := statement_timestamp() + p_lease_ms * interval '1 millisecond';
  live_records bigint;
  live_bytes bigint;
  pruned integer;
BEGIN
  -- A backend that holds a liveness lock serves this claim too: the server sessions are shared
  -- between clients, and a lock tried here would be granted by the session's own hold of it.
  IF coalesce(current_setting('${LIVENESS_MARK}', true), '') <> '' THEN
    RAISE EXCEPTION 'the claim ran on a liveness session''s backend' USING ERRCODE = '${SHARED_SESSION}';
  END IF;
  ${lockScope('p_scope')}
  -- The key's row, live or not: one that expired and is not reaped yet is taken over like a free key.
  SELECT * INTO held FROM ${p}records r WHERE r.scope = p_scope AND r.idempotency_key = p_key FOR UPDATE;
  found_held := FOUND;
  -- An in-progress record whose holder no longer runs is free: its process died.
  live := found_held AND held.expires_at > statement_timestamp() AND (held.state <> 'inProgress' OR
    ${p}holder_alive(held.holder_lock, held.holder_epoch));

  IF live THEN
    IF p_continuation AND held.state = 'awaitingInput' AND held.fingerprint = p_fingerprint THEN
      ${checkOwnLock}
      -- The continuation takes the key over; the record's response and size stay, for release.
      UPDATE ${p}records r SET state = 'inProgress', token = p_token, expires_at = lease_end,
          holder_lock = p_holder_lock, holder_epoch = pg_postmaster_start_time(), resumed_until = held.expires_at
        WHERE r.scope = p_scope AND r.idempotency_key = p_key;
      RETURN QUERY SELECT 'resumed', NULL::text, NULL::text;
      RETURN;
    END IF;
    RETURN QUERY SELECT held.state, held.fingerprint,
      CASE WHEN held.state = 'inProgress' THEN NULL ELSE held.response END;
    RETURN;
  END IF;

  -- The caller's quota, without this key's own row (expired, or its holder dead), if it has one.
  -- The usage counts rows the reaper has not deleted yet: before refusing, this caller's expired
  -- rows go (this key's among them), and the quota is read again.
  FOR pruned IN 0 .. 1 LOOP
    SELECT u.records, u.bytes INTO live_records, live_bytes FROM ${p}usage u WHERE u.scope = p_scope;
    live_records := coalesce(live_records, 0) - CASE WHEN found_held THEN 1 ELSE 0 END;
    live_bytes := coalesce(live_bytes, 0) - CASE WHEN found_held THEN held.bytes ELSE 0 END;
    EXIT WHEN live_records < p_max_records AND live_bytes < p_max_bytes;
    IF pruned = 1 THEN
      RETURN QUERY SELECT 'quota', NULL::text, NULL::text;
      RETURN;
    END IF;
    PERFORM ${p}prune(p_scope, NULL);
    SELECT * INTO held FROM ${p}records r WHERE r.scope = p_scope AND r.idempotency_key = p_key FOR UPDATE;
    found_held := FOUND;
  END LOOP;
  ${checkOwnLock}
  INSERT INTO ${p}records AS r (scope, idempotency_key, state, fingerprint, expires_at, token,
      holder_lock, holder_epoch)
    VALUES (p_scope, p_key, 'inProgress', p_fingerprint, lease_end, p_token, p_holder_lock,
      pg_postmaster_start_time())
    ON CONFLICT (scope, idempotency_key) DO UPDATE SET state = 'inProgress',
      fingerprint = EXCLUDED.fingerprint, response = NULL, bytes = 0, expires_at = EXCLUDED.expires_at,
      token = EXCLUDED.token, holder_lock = EXCLUDED.holder_lock, holder_epoch = EXCLUDED.holder_epoch,
      resumed_until = NULL;
  -- A new row, or an expired or dead holder's row taken over with its size let go.
  PERFORM ${p}count(p_scope, CASE WHEN found_held THEN 0 ELSE 1 END,
    CASE WHEN found_held THEN -held.bytes ELSE 0 END);
  RETURN QUERY SELECT 'claimed', NULL::text, NULL::text;
END
$claim$;

-- Replaces my live claim with the final (or awaiting-input) record; answers whether it still was
-- mine. With p_or_fail it raises instead of answering false: in a tool's transaction, whose COMMIT
-- is already on its way behind it, the error is what makes Postgres roll the tool's writes back.
CREATE OR REPLACE FUNCTION ${p}settle(
  p_scope text, p_key text, p_token uuid, p_state text, p_response text, p_bytes bigint,
  p_retention_ms bigint, p_or_fail boolean)
RETURNS boolean
LANGUAGE plpgsql AS $settle$
DECLARE
  counted bigint;
BEGIN
  ${lockScope('p_scope')}
  SELECT r.bytes INTO counted FROM ${p}records r
    WHERE r.scope = p_scope AND r.idempotency_key = p_key AND r.token = p_token
      AND r.state = 'inProgress' AND r.expires_at > statement_timestamp()
    FOR UPDATE;
  IF NOT FOUND THEN
    IF p_or_fail THEN
      RAISE EXCEPTION 'the idempotency claim has lost its key' USING ERRCODE = '${CLAIM_LOST}';
    END IF;
    RETURN false;
  END IF;
  UPDATE ${p}records r SET state = p_state, response = p_response, bytes = p_bytes,
      expires_at = statement_timestamp() + p_retention_ms * interval '1 millisecond',
      token = NULL, holder_lock = NULL, holder_epoch = NULL, resumed_until = NULL
    WHERE r.scope = p_scope AND r.idempotency_key = p_key;
  PERFORM ${p}count(p_scope, 0, p_bytes - counted);
  RETURN true;
END
$settle$;

-- Nothing ran: a fresh claim's row goes; a continuation's puts back the awaiting-input record it
-- took over, with that record's own expiry (already passed, it is as good as gone, and the reaper
-- deletes it). Answers whether the claim still was mine.
CREATE OR REPLACE FUNCTION ${p}release(p_scope text, p_key text, p_token uuid)
RETURNS boolean
LANGUAGE plpgsql AS $release$
DECLARE
  held ${p}records%ROWTYPE;
BEGIN
  ${lockScope('p_scope')}
  SELECT * INTO held FROM ${p}records r
    WHERE r.scope = p_scope AND r.idempotency_key = p_key AND r.token = p_token
      AND r.state = 'inProgress' AND r.expires_at > statement_timestamp()
    FOR UPDATE;
  IF NOT FOUND THEN RETURN false; END IF;
  IF held.resumed_until IS NULL THEN
    DELETE FROM ${p}records r WHERE r.scope = p_scope AND r.idempotency_key = p_key;
    PERFORM ${p}count(p_scope, -1, -held.bytes);
  ELSE
    UPDATE ${p}records r SET state = 'awaitingInput', expires_at = held.resumed_until,
        token = NULL, holder_lock = NULL, holder_epoch = NULL, resumed_until = NULL
      WHERE r.scope = p_scope AND r.idempotency_key = p_key;
  END IF;
  RETURN true;
END
$release$;

-- The reaper: deletes the expired rows in the table's blocks [p_first_block, p_first_block +
-- p_blocks) and uncounts them; answers how many went, and the block to start the next call at
-- (0 once the walk has passed the table's end). Run by every instance on a timer, never by a
-- claim (see the store). A walk by blocks costs each call the same, however large the table and
-- with no index on expires_at to keep up. Safe with any number of instances: a row another
-- reaper or a claim has locked is skipped, not waited for (SKIP LOCKED), so no row is uncounted
-- twice, and the usage rows are updated in scope order, so two reapers never wait for each other.
CREATE OR REPLACE FUNCTION ${p}reap(p_first_block bigint, p_blocks bigint, OUT reaped bigint, OUT next_block bigint)
LANGUAGE plpgsql AS $reap$
DECLARE
  scopes text[];
  gone_records bigint[];
  gone_bytes bigint[];
BEGIN
  WITH gone AS (
    DELETE FROM ${p}records r WHERE r.ctid = ANY (ARRAY(
      SELECT e.ctid FROM ${p}records e
        WHERE e.ctid >= format('(%s,0)', p_first_block)::tid
          AND e.ctid < format('(%s,0)', p_first_block + p_blocks)::tid
          AND e.expires_at <= statement_timestamp()
        FOR UPDATE SKIP LOCKED))
    RETURNING r.scope, r.bytes),
  per_scope AS (SELECT gone.scope, count(*) AS records, sum(gone.bytes) AS bytes FROM gone GROUP BY gone.scope)
  SELECT array_agg(s.scope ORDER BY s.scope), array_agg(s.records ORDER BY s.scope),
      array_agg(s.bytes ORDER BY s.scope)
    INTO scopes, gone_records, gone_bytes FROM per_scope s;
  reaped := 0;
  FOR i IN 1 .. coalesce(array_length(scopes, 1), 0) LOOP
    PERFORM ${p}count(scopes[i], -gone_records[i], -gone_bytes[i]);
    reaped := reaped + gone_records[i];
  END LOOP;
  next_block := p_first_block + p_blocks;
  IF next_block * current_setting('block_size')::bigint >= pg_relation_size('${p}records') THEN
    next_block := 0;
  END IF;
END
$reap$;`;
}

// --- What each session sets for itself ---
//
// Sent as statements once a session is connected, never as start-up parameters: PgBouncer
// refuses a connection that carries any it does not know ("unsupported startup parameter:
// statement_timeout"), and with the setting that makes it ignore them, they would silently not apply.

/**
 * Every session of the store's pool, $1 the statement timeout in ms: Postgres stops a statement
 * its caller gave up on. And commits wait at least for this server's disk (`on`, or more where
 * the server asks more): a claim or record a role or database sets to commit asynchronously
 * (`off`, `local`, `remote_write`) could be lost by a crash, or a failover to a synchronous
 * standby, after its caller was answered, and its retry would execute again.
 */
export const SESSION_SETTINGS = `SELECT set_config('statement_timeout', $1, false),
    CASE WHEN current_setting('synchronous_commit') IN ('off', 'local', 'remote_write')
      THEN set_config('synchronous_commit', 'on', false) END`;

/**
 * A liveness session, $1 the statement timeout in ms: no idle timeout ends it (a DBA's
 * `idle_session_timeout` reaps idle sessions, and a liveness session is idle by design), and
 * TCP keepalives end it within about 25 s of its host vanishing, where the kernel's default
 * takes over two hours (ignored on a Unix socket, where no host can vanish). Only the parameters
 * this server has (idle_session_timeout is Postgres 14's).
 */
export const LIVENESS_SETTINGS = `SELECT set_config(s.name, s.value, false) FROM (VALUES
    ('statement_timeout', $1::text), ('idle_session_timeout', '0'), ('idle_in_transaction_session_timeout', '0'),
    ('tcp_keepalives_idle', '10'), ('tcp_keepalives_interval', '5'), ('tcp_keepalives_count', '3')
  ) AS s(name, value) WHERE s.name IN (SELECT name FROM pg_settings)`;

/** Takes the store's liveness lock ($1) for the session, and marks its backend as a liveness session's. */
export const TAKE_LIVENESS_LOCK = `SELECT set_config('${LIVENESS_MARK}', $1::text, false),
    pg_advisory_lock_shared($1::bigint), pg_backend_pid() AS pid`;

/** The backend a session's statement runs on, and the liveness lock it is marked with ('' for none). */
export const SESSION_IDENTITY = `SELECT pg_backend_pid() AS pid, coalesce(current_setting('${LIVENESS_MARK}', true), '') AS mark`;

/** A table prefix Postgres takes as part of an identifier, or a RangeError saying why not. */
export function checkedTablePrefix(prefix: string): string {
  if (!TABLE_PREFIX_PATTERN.test(prefix)) {
    throw new RangeError(
      `a Postgres table prefix must be lower case letters, digits and _ (at most 40): "${prefix}"`,
    );
  }
  return prefix;
}

/** The statements the store sends, under its table prefix. */
export interface Statements {
  claim: string;
  settle: string;
  /** The settle of a tool's transaction: raises (CLAIM_LOST) where `settle` answers false. */
  settleOrFail: string;
  release: string;
  renew: string;
  /** $1 the first block, $2 how many: see the reap function. */
  reap: string;
  clear: string;
}

// Each statement takes the claim's (scope, key, token) as $1..$3, and changes the row only while
// it still holds that exact live claim: a claim that lost its key (its lease ran out, or the key
// was taken over) changes nothing, and a completed record's token is NULL.
export function statementsOf(p: string): Statements {
  const mine = `scope = $1 AND idempotency_key = $2 AND token = $3 AND state = 'inProgress' AND expires_at > statement_timestamp()`;
  return {
    // $7 the caller's liveness lock, $8 and $9 its quotas.
    claim: `SELECT answer, fingerprint, response FROM ${p}claim($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    // $4 the state, $5 the response's JSON, $6 its size, $7 the retention in ms.
    settle: `SELECT ${p}settle($1, $2, $3, $4, $5, $6, $7, false) AS settled`,
    settleOrFail: `SELECT ${p}settle($1, $2, $3, $4, $5, $6, $7, true) AS settled`,
    release: `SELECT ${p}release($1, $2, $3) AS released`,
    reap: `SELECT reaped, next_block FROM ${p}reap($1, $2)`,
    // $4 the lease in ms. The claim keeps its stamp: its store's lock is the same all its life.
    renew: `UPDATE ${p}records SET expires_at = statement_timestamp() + $4 * interval '1 millisecond'
      WHERE ${mine}`,
    // One statement, so no claim sees the records gone and their usage still there.
    clear: `WITH gone AS (DELETE FROM ${p}records) DELETE FROM ${p}usage`,
  };
}
