// --- The Redis store's Lua scripts: each decision one atomic script ---
//
// Redis runs one script at a time, so each script below is a single step no other instance can
// interleave with; store.ts calls them and reads their answers.

// Every script starts with `#!lua` (no flags): Redis then refuses to run it at all while it is
// out of memory, as it refuses a plain write, instead of letting it write past `maxmemory`.
// The scripts' keys: KEYS[1] the record; KEYS[2] the scope's index (sorted set: record key →
// expiry, in Redis' own milliseconds); KEYS[3] the scope's sizes (hash: record key → characters,
// and the field "" → their total). The index keys expire once nothing in them can be live: `index`
// keeps the sorted set for as long as the record it just scored, `sized` the sizes too, for a
// record whose size is counted (an unsized claim adds nothing to the hash, so it leaves its expiry
// alone). KEYS[4] is the marker (see MARKER below), for the scripts that must tell vanished data.
const SCOPE_INDEX = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function keep_for(key, ms)
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end
local function index(now, ms)
  redis.call('ZADD', KEYS[2], now + ms, KEYS[1])
  keep_for(KEYS[2], ms)
end
local function sized(now, ms)
  index(now, ms)
  keep_for(KEYS[3], ms)
end`;

// --- The marker: did Redis lose its data? ---
//
// Every key the store writes has a TTL, but one: the marker, a key with no expiry that the store
// writes when it starts (SET NX, so every instance shares the first one's), one for a single Redis
// and one per hash slot on a cluster (a script may only touch its own slot's keys; a slot's marker
// moves with the slot's records when a slot migrates). It holds an epoch, `<epoch>`, or, once its
// data is known lost, `<epoch>|<when, in Redis' ms>`. Missing, the records it stood beside went away
// with it: a restart without persistence, FLUSHALL, FLUSHDB. Such a loss is only dangerous while a
// call that lost its claim still runs, at most one lease, so the claim that finds the marker missing
// re-arms it as lost, and every claim of a free key fails closed until a lease has passed since:
// long enough for the running call to renew (a third of its lease) or record, which puts its key
// back (RENEW and COMPLETE below: a claim whose key and marker both changed under it holds the
// key again). A key that holds a record is answered as always: only "free" is refused.
// Each script that reads the marker ends its ARGV with a nonce (the claim's token), for the
// epoch of a marker it re-arms. `lost_under(epoch)`: true if the data went away under a claim of
// that epoch (the marker missing, or of another epoch), and then new claims fail closed from now,
// unless a claim has already made them.
const MARKER = `
local function epoch_of(m) return string.match(m, '^[^|]*') end
local function lost_at(m) local at = string.match(m, '|(%d+)$') return at and tonumber(at) end
local function mark_lost(now) redis.call('SET', KEYS[4], now .. '-' .. ARGV[#ARGV] .. '|' .. now) end`;
const LOST_UNDER = `${MARKER}
local function lost_under(epoch)
  local m = redis.call('GET', KEYS[4])
  if m and epoch_of(m) == epoch then return false end
  if not m or not lost_at(m) then mark_lost(now_ms()) end
  return true
end`;

// It may not look it, but this is safe from races across any number of instances: Redis runs
// one script at a time, so of N concurrent claims of one key exactly one finds it free, and the
// others get the record that holds it, in the same round trip. The PX lease frees the key if
// the claimant dies mid-execution. A continuation takes over an awaiting-input record of its
// own fingerprint instead: ARGV[5] is how such a record begins (the state, then the fingerprint,
// as the JSON below writes them), empty for an opening round; the record's size stays counted.
// A key found free is claimed only while the marker says the data is whole (see MARKER).
// The quota prunes what has expired before it counts; nothing has, mostly, and then the claim
// writes nothing but its record and its index entry.
// ARGV: claim value, lease, quota of records, quota of bytes, awaiting-input prefix, a nonce.
// Answers {'held', value}, {'resumed', value, its expiry, epoch}, {'quota'}, {'lost', since} or
// {'claimed', epoch}: the epoch goes into the ticket, for RENEW and COMPLETE to tell a loss by.
export const CLAIM_SCRIPT = `#!lua${SCOPE_INDEX}${MARKER}
local held = redis.call('GET', KEYS[1])
if held then
  if ARGV[5] == '' or string.sub(held, 1, #ARGV[5]) ~= ARGV[5] then return {'held', held} end
  local now = now_ms()
  local expires = now + redis.call('PTTL', KEYS[1])
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  sized(now, tonumber(ARGV[2]))
  local mark = redis.call('GET', KEYS[4])
  return {'resumed', held, expires, mark and epoch_of(mark) or ''}
end
local now = now_ms()
local mark = redis.call('GET', KEYS[4])
if not mark then
  mark_lost(now)
  return {'lost', now}
end
local lost = lost_at(mark)
if lost and now < lost + tonumber(ARGV[2]) then return {'lost', lost} end
local total = tonumber(redis.call('HGET', KEYS[3], '') or '0')
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
if #expired > 0 then
  local counted = total
  for _, gone in ipairs(expired) do
    total = total - tonumber(redis.call('HGET', KEYS[3], gone) or '0')
    redis.call('HDEL', KEYS[3], gone)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if total ~= counted then redis.call('HSET', KEYS[3], '', total) end
end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) or total >= tonumber(ARGV[4]) then
  return {'quota'}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
index(now, tonumber(ARGV[2]))
return {'claimed', epoch_of(mark)}`;

// The claim is released only by the claimant: replace the value with the completed record
// if, and only if, it is still the exact in-progress value this claim wrote (its token is
// unique). A claim whose lease expired, and maybe was re-claimed, changes nothing. Lua runs
// atomically, so nothing can slip in between the GET and the SET. The new value's size replaces
// whatever the key counted (an awaiting-input record it resumed). One more case records: the key
// is empty because Redis lost its data while the call ran (the marker went, or changed epoch,
// since the claim): nobody else can hold it, so the answer is kept, and the retry replays it.
// ARGV: claim value, completed (or awaiting-input) value, retention, the value's size, the
// claim's epoch, a nonce. The sizes are written before `sized` sets their expiry: the first record
// of a scope creates the hash, and an expiry set before the hash exists sets nothing.
export const COMPLETE_SCRIPT = `#!lua${SCOPE_INDEX}${LOST_UNDER}
local held = redis.call('GET', KEYS[1])
if held ~= ARGV[1] and (held or not lost_under(ARGV[5])) then return false end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
local counted = redis.call('HMGET', KEYS[3], KEYS[1], '')
local total = tonumber(counted[2] or '0') + tonumber(ARGV[4]) - tonumber(counted[1] or '0')
redis.call('HSET', KEYS[3], KEYS[1], ARGV[4], '', total)
sized(now_ms(), tonumber(ARGV[3]))
return 1`;

// Nothing ran: the claimant puts back the awaiting-input record its continuation took over, with
// its own expiry, or else removes the key and what it counted. Only while the key still holds
// this claim's exact value. ARGV: claim value, the record to put back (or ''), its expiry.
export const RELEASE_SCRIPT = `#!lua${SCOPE_INDEX}
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' then
  local left = tonumber(ARGV[3]) - now_ms()
  if left > 0 then
    redis.call('SET', KEYS[1], ARGV[2], 'PX', left)
    redis.call('ZADD', KEYS[2], ARGV[3], KEYS[1])
    return 1
  end
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], KEYS[1])
local counted = tonumber(redis.call('HGET', KEYS[3], KEYS[1]) or '0')
redis.call('HDEL', KEYS[3], KEYS[1])
redis.call('HINCRBY', KEYS[3], '', 0 - counted)
return 1`;

// A live claim's lease is extended by its claimant only, and only while the key still holds
// this claim's exact value: a claim that lost its key to its lease, or to another claim, must not
// resurrect it. Its entry in the scope's index moves with it, so the quota counts it for as long
// as it lives. But a claim whose key Redis lost (the key empty, the marker gone or of another
// epoch) holds it again: the call still runs, and nobody else may have it (see MARKER).
// ARGV: claim value, lease, the claim's epoch, a nonce.
export const RENEW_SCRIPT = `#!lua${SCOPE_INDEX}${LOST_UNDER}
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
elseif held or not lost_under(ARGV[3]) then
  return 0
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
sized(now_ms(), tonumber(ARGV[2]))
return 1`;

// Arms the markers when a store starts: the first instance's epoch, kept by every later one.
// ARGV[1] the epoch; the marker is KEYS[1] on a single Redis. On a cluster the markers of one
// node's slots follow the epoch in ARGV instead: declared keys must share one slot, while a
// script with this flag may touch keys of every slot its node serves.
export const ARM_SCRIPT = `#!lua flags=allow-cross-slot-keys
for _, key in ipairs(KEYS) do redis.call('SET', key, ARGV[1], 'NX') end
for i = 2, #ARGV do redis.call('SET', ARGV[i], ARGV[1], 'NX') end
return 1`;
