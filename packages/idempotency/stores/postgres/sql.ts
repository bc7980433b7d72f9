// --- The Postgres store's SQL: its schema, its functions and the statements it sends ---
//
// What `store.ts` sends, kept apart from it so that the store reads as the contract and each
// statement can be read here as SQL. Everything is built under a table prefix, so tests and
// tenants do not collide.

/** Prefixes become parts of SQL identifiers (at most 63 bytes each): lower case, digits and `_` only. */
const TABLE_PREFIX_PATTERN = /^[a-z_][a-z0-9_]{0,39}$/;

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
-- The primary key is the table's only index: the one a lookup needs, and all a claim writes. With
-- no index on expires_at, settling a claim (which moves its expiry) rewrites no index entry
-- either, and can be a heap-only update. The reaper finds expired rows by walking the table's
-- blocks instead (see reap). An earlier version pruned by these two; drop them once no instance
-- of that version runs, which this migration assumes.
DROP INDEX IF EXISTS ${p}records_scope_expiry;
DROP INDEX IF EXISTS ${p}records_expiry;

-- What each scope's rows add up to, expired or not: its quota's count, read by a claim in one
-- lookup, where counting the rows cost a claim a scan of all its caller's records. Kept by every
-- function below, each under the scope's advisory lock, and by the reaper. Created with the counts of the rows already
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
  p_holder_pid integer, p_holder_started timestamptz, p_max_records bigint, p_max_bytes bigint)
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
  ${lockScope('p_scope')}
  -- The key's row, live or not: one that expired and is not reaped yet is taken over like a free key.
  SELECT * INTO held FROM ${p}records r WHERE r.scope = p_scope AND r.idempotency_key = p_key FOR UPDATE;
  found_held := FOUND;
  -- An in-progress record whose holder session has ended is free: its process died.
  live := found_held AND held.expires_at > statement_timestamp() AND (held.state <> 'inProgress' OR EXISTS (
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
  INSERT INTO ${p}records AS r (scope, idempotency_key, state, fingerprint, expires_at, token,
      holder_pid, holder_started)
    VALUES (p_scope, p_key, 'inProgress', p_fingerprint, lease_end, p_token, p_holder_pid, p_holder_started)
    ON CONFLICT (scope, idempotency_key) DO UPDATE SET state = 'inProgress',
      fingerprint = EXCLUDED.fingerprint, response = NULL, bytes = 0, expires_at = EXCLUDED.expires_at,
      token = EXCLUDED.token, holder_pid = EXCLUDED.holder_pid, holder_started = EXCLUDED.holder_started,
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
      token = NULL, holder_pid = NULL, holder_started = NULL, resumed_until = NULL
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
        token = NULL, holder_pid = NULL, holder_started = NULL, resumed_until = NULL
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
    claim: `SELECT answer, fingerprint, response FROM ${p}claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
    // $4 the state, $5 the response's JSON, $6 its size, $7 the retention in ms.
    settle: `SELECT ${p}settle($1, $2, $3, $4, $5, $6, $7, false) AS settled`,
    settleOrFail: `SELECT ${p}settle($1, $2, $3, $4, $5, $6, $7, true) AS settled`,
    release: `SELECT ${p}release($1, $2, $3) AS released`,
    reap: `SELECT reaped, next_block FROM ${p}reap($1, $2)`,
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
