// --- The Redis store's Lua scripts: each decision one atomic script ---
//
// Redis runs one script at a time, so each script below is a single step no other instance can
// interleave with; store.ts calls them and reads their answers.

// Every script starts with `#!lua` (no flags): Redis then refuses to run it at all while it is
// out of memory, as it refuses a plain write, instead of letting it write past `maxmemory`.
// The scripts' keys: KEYS[1] the record; KEYS[2] the scope's index (sorted set: record key →
// expiry, in Redis' own milliseconds); KEYS[3] the scope's sizes (hash: record key → characters,
// and the field "" → their total). The index keys expire once nothing in them can be live.
const SCOPE_INDEX = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function keep_for(key, ms)
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end
local function index(ms)
  redis.call('ZADD', KEYS[2], now_ms() + ms, KEYS[1])
  keep_for(KEYS[2], ms)
  keep_for(KEYS[3], ms)
end`;

// It may not look it, but this is safe from races across any number of instances: Redis runs
// one script at a time, so of N concurrent claims of one key exactly one finds it free, and the
// others get the record that holds it, in the same round trip. The PX lease frees the key if
// the claimant dies mid-execution. A continuation takes over an awaiting-input record of its
// own fingerprint instead: ARGV[5] is how such a record begins (the state, then the fingerprint,
// as the JSON below writes them), empty for an opening round; the record's size stays counted.
// ARGV: claim value, lease, quota of records, quota of bytes, awaiting-input prefix.
// Answers {'held', value}, {'resumed', value, its expiry}, {'quota'} or {'claimed'}.
export const CLAIM_SCRIPT = `#!lua${SCOPE_INDEX}
local held = redis.call('GET', KEYS[1])
if held then
  if ARGV[5] == '' or string.sub(held, 1, #ARGV[5]) ~= ARGV[5] then return {'held', held} end
  local expires = now_ms() + redis.call('PTTL', KEYS[1])
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  index(tonumber(ARGV[2]))
  return {'resumed', held, expires}
end
local now = now_ms()
local total = tonumber(redis.call('HGET', KEYS[3], '') or '0')
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
  total = total - tonumber(redis.call('HGET', KEYS[3], gone) or '0')
  redis.call('HDEL', KEYS[3], gone)
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('HSET', KEYS[3], '', total)
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) or total >= tonumber(ARGV[4]) then
  return {'quota'}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
index(tonumber(ARGV[2]))
return {'claimed'}`;

// The claim is released only by the claimant: replace the value with the completed record
// if, and only if, it is still the exact in-progress value this claim wrote (its token is
// unique). A claim whose lease expired, and maybe was re-claimed, changes nothing. Lua runs
// atomically, so nothing can slip in between the GET and the SET. The new value's size replaces
// whatever the key counted (an awaiting-input record it resumed). ARGV: claim value, completed
// (or awaiting-input) value, retention, the value's size.
export const COMPLETE_SCRIPT = `#!lua${SCOPE_INDEX}
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
index(tonumber(ARGV[3]))
local counted = tonumber(redis.call('HGET', KEYS[3], KEYS[1]) or '0')
redis.call('HSET', KEYS[3], KEYS[1], ARGV[4])
redis.call('HINCRBY', KEYS[3], '', tonumber(ARGV[4]) - counted)
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
// this claim's exact value: a claim that already lost its key must not resurrect it. Its entry
// in the scope's index moves with it, so the quota counts it for as long as it lives.
export const RENEW_SCRIPT = `#!lua${SCOPE_INDEX}
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
index(tonumber(ARGV[2]))
return 1`;
