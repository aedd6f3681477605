-- Shared helpers, prepended to every STM script.  KEYS[1] is the user's key prefix
-- ("<ns>:user:{<user_id>}:"); every key touched shares its hash tag.

local P = KEYS[1]

-- Per-session eviction order (DESIGN §3 addition): ZSET id -> importance, then updated_at,
-- in one score (importance to 4 decimals above the timestamp), so the per-session cap
-- evicts with one ZRANGE instead of reading every item of a full session.
local function evict_key(session_suffix)
  return P .. 'evict:' .. string.sub(session_suffix, 9)  -- 'session:' is 8 characters
end

local function evict_score(importance, updated_at)
  return math.floor((tonumber(importance) or 0) * 10000) * 1e10 + (tonumber(updated_at) or 0)
end

local function unindex(id)
  -- Remove an item from every index it was written to, and the item itself.
  local ikey = P .. 'item:' .. id
  local fields = redis.call('HMGET', ikey, '_idx', 'canonical_fact_key', 'fingerprint')
  if fields[1] then
    for _, suffix in ipairs(cjson.decode(fields[1])) do
      redis.call('ZREM', P .. suffix, id)
      if string.sub(suffix, 1, 8) == 'session:' then redis.call('ZREM', evict_key(suffix), id) end
    end
  end
  redis.call('ZREM', P .. 'expire', id)
  if fields[2] and redis.call('HGET', P .. 'canon', fields[2]) == id then
    redis.call('HDEL', P .. 'canon', fields[2])
  end
  if fields[3] and redis.call('HGET', P .. 'fp', fields[3]) == id then
    redis.call('HDEL', P .. 'fp', fields[3])
  end
  return redis.call('DEL', ikey)
end
