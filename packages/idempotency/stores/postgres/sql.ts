// --- The Postgres store's SQL: its schema, its functions and the statements it sends ---
//
// What `store.ts` sends, kept apart from it so that the store reads as the contract and each
// statement can be read here as SQL. Everything is built under a table prefix, so tests and
// tenants do not collide.

/** Prefixes become parts of SQL identifiers (at most 63 bytes each): lower case, digits and `_` only. */
const TABLE_PREFIX_PATTERN = /^[a-z_][a-z0-9_]{0,39}$/;

/**
 * Expired rows a claim deletes as it writes its own: more than it adds, so the table never
 * grows past its live records by much, at a bounded cost per claim.
 */
const PRUNE_PER_CLAIM = 16;

/** SQLSTATE the settle function raises for a claim that lost its key (PL/pgSQL's no_data_found). */
export const CLAIM_LOST = 'P0002';

// --- The schema ---
//
// One row per (scope, idempotency_key), the key's state in `state`:
//   inProgress     a claim whose call runs: `token` (unique per claim), `holder_pid` and
//                  `holder_started` (its store's liveness session), `expires_at` (the lease).
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
  holder_pid      integer,
  holder_started  timestamptz,
  resumed_until   timestamptz,
  PRIMARY KEY (scope, idempotency_key)
);
-- What a claim prunes: its own scope's expired rows, and the oldest of anyone's.
CREATE INDEX IF NOT EXISTS ${p}records_scope_expiry ON ${p}records (scope, expires_at);
CREATE INDEX IF NOT EXISTS ${p}records_expiry ON ${p}records (expires_at);

-- What each scope's rows add up to, expired or not: its quota's count, read by a claim in one
-- lookup, where counting the rows cost a claim a scan of all its caller's records. Kept by every
-- function below, each under the scope's advisory lock. Created with the counts of the rows already
-- there (a table of an earlier version); instances of an earlier version would not keep it.
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
-- uncounts them. The caller holds the scope's advisory lock.
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

-- It may not look it, but this is safe from races across any number of instances. Every claim of
-- a scope first takes that scope's transaction-level advisory lock, so claims of one scope run
-- one at a time: of N concurrent claims of one key exactly one finds it free, and the quota
-- counts what no other claim can add to meanwhile. Every other function that changes a scope's
-- rows or usage takes the same lock, so the usage it reads is exact. A claim prunes other scopes
-- only if their lock is free (pg_try_advisory_xact_lock): it never waits for a second scope,
-- so no two statements can each hold the lock the other waits for. Renew takes no lock: it
-- changes only a live claim's lease, and the FOR UPDATE row lock orders it. Every lock ends with
-- the statement's own transaction: nothing is held across a tool's call.
-- Answers (answer, fingerprint, response): 'claimed'; 'resumed' (a continuation took over an
-- awaiting-input record); 'quota'; or the live record's state, with its fingerprint and response.
CREATE OR REPLACE FUNCTION ${p}claim(
  p_scope text, p_key text, p_fingerprint text, p_token uuid, p_lease_ms bigint, p_continuation boolean,
  p_holder_pid integer, p_holder_started timestamptz, p_max_records bigint, p_max_bytes bigint)
RETURNS TABLE (answer text, fingerprint text, response text)
LANGUAGE plpgsql AS $claim$
DECLARE
  held ${p}records%ROWTYPE;
  found_held boolean;
  live boolean;
  lease_end timestamptz := statement_timestamp() + p_lease_ms * interval '1 millisecond';
  other_scope text;
  live_records bigint;
  live_bytes bigint;
BEGIN
  ${lockScope('p_scope')}
  SELECT * INTO held FROM ${p}records r
    WHERE r.scope = p_scope AND r.idempotency_key = p_key AND r.expires_at > statement_timestamp()
    FOR UPDATE;
  found_held := FOUND;
  -- An in-progress record whose holder session has ended is free: its process died.
  live := found_held AND (held.state <> 'inProgress' OR EXISTS (
    SELECT 1 FROM pg_stat_activity a
    WHERE a.pid = held.holder_pid AND a.backend_start = held.holder_started));

  IF live THEN
    IF p_continuation AND held.state = 'awaitingInput' AND held.fingerprint = p_fingerprint THEN
      -- The continuation takes the key over; the record's response and size stay, for release.
      UPDATE ${p}records r SET state = 'inProgress', token = p_token, expires_at = lease_end,
          holder_pid = p_holder_pid, holder_started = p_holder_started, resumed_until = held.expires_at
        WHERE r.scope = p_scope AND r.idempotency_key = p_key;
      RETURN QUERY SELECT 'resumed', NULL::text, NULL::text;
      RETURN;
    END IF;
    RETURN QUERY SELECT held.state, held.fingerprint,
      CASE WHEN held.state = 'inProgress' THEN NULL ELSE held.response END;
    RETURN;
  END IF;

  -- This caller's expired rows go, each once, so its usage counts only live ones; then the
  -- oldest expired rows of a few callers nobody is writing for, so no table keeps what expired.
  PERFORM ${p}prune(p_scope, NULL);
  FOR other_scope IN
    SELECT DISTINCT e.scope FROM (SELECT e.scope FROM ${p}records e WHERE e.expires_at <= statement_timestamp()
      ORDER BY e.expires_at LIMIT ${PRUNE_PER_CLAIM}) e
  LOOP
    IF pg_try_advisory_xact_lock(hashtext('${p}'), hashtext(other_scope)) THEN
      PERFORM ${p}prune(other_scope, ${PRUNE_PER_CLAIM});
    END IF;
  END LOOP;

  -- The caller's quota, without this key's own row: if one is left, its holder is dead.
  SELECT u.records, u.bytes INTO live_records, live_bytes FROM ${p}usage u WHERE u.scope = p_scope;
  live_records := coalesce(live_records, 0) - CASE WHEN found_held THEN 1 ELSE 0 END;
  live_bytes := coalesce(live_bytes, 0) - CASE WHEN found_held THEN held.bytes ELSE 0 END;
  IF live_records >= p_max_records OR live_bytes >= p_max_bytes THEN
    RETURN QUERY SELECT 'quota', NULL::text, NULL::text;
    RETURN;
  END IF;
  INSERT INTO ${p}records AS r (scope, idempotency_key, state, fingerprint, expires_at, token,
      holder_pid, holder_started)
    VALUES (p_scope, p_key, 'inProgress', p_fingerprint, lease_end, p_token, p_holder_pid, p_holder_started)
    ON CONFLICT (scope, idempotency_key) DO UPDATE SET state = 'inProgress',
      fingerprint = EXCLUDED.fingerprint, response = NULL, bytes = 0, expires_at = EXCLUDED.expires_at,
      token = EXCLUDED.token, holder_pid = EXCLUDED.holder_pid, holder_started = EXCLUDED.holder_started,
      resumed_until = NULL;
  -- A new row, or a dead holder's taken over with its size (a continuation's) let go.
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
      token = NULL, holder_pid = NULL, holder_started = NULL, resumed_until = NULL
    WHERE r.scope = p_scope AND r.idempotency_key = p_key;
  PERFORM ${p}count(p_scope, 0, p_bytes - counted);
  RETURN true;
END
$settle$;

-- Nothing ran: a fresh claim's row goes; a continuation's puts back the awaiting-input record it
-- took over, with that record's own expiry (already passed, it is as good as gone, and the next
-- claim of the scope prunes it). Answers whether the claim still was mine.
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
        token = NULL, holder_pid = NULL, holder_started = NULL, resumed_until = NULL
      WHERE r.scope = p_scope AND r.idempotency_key = p_key;
  END IF;
  RETURN true;
END
$release$;`;
}

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
  restamp: string;
  clear: string;
}

// Each statement takes the claim's (scope, key, token) as $1..$3, and changes the row only while
// it still holds that exact live claim: a claim that lost its key (its lease ran out, or the key
// was taken over) changes nothing, and a completed record's token is NULL.
export function statementsOf(p: string): Statements {
  const mine = `scope = $1 AND idempotency_key = $2 AND token = $3 AND state = 'inProgress' AND expires_at > statement_timestamp()`;
  return {
    claim: `SELECT answer, fingerprint, response FROM ${p}claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
    // $4 the state, $5 the response's JSON, $6 its size, $7 the retention in ms.
    settle: `SELECT ${p}settle($1, $2, $3, $4, $5, $6, $7, false) AS settled`,
    settleOrFail: `SELECT ${p}settle($1, $2, $3, $4, $5, $6, $7, true) AS settled`,
    release: `SELECT ${p}release($1, $2, $3) AS released`,
    // $4 the lease in ms; $5, $6 the current liveness session, if any (else the claim keeps its own).
    renew: `UPDATE ${p}records SET expires_at = statement_timestamp() + $4 * interval '1 millisecond',
        holder_pid = coalesce($5, holder_pid), holder_started = coalesce($6::timestamptz, holder_started)
      WHERE ${mine}`,
    restamp: `UPDATE ${p}records r SET holder_pid = $4, holder_started = $5
      FROM unnest($1::text[], $2::text[], $3::uuid[]) AS c(scope, idempotency_key, token)
      WHERE r.scope = c.scope AND r.idempotency_key = c.idempotency_key AND r.token = c.token
        AND r.state = 'inProgress'`,
    // One statement, so no claim sees the records gone and their usage still there.
    clear: `WITH gone AS (DELETE FROM ${p}records) DELETE FROM ${p}usage`,
  };
}
