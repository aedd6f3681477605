-- The promotion scan's read of one user (core/lifecycle/views.py parses the reply).
-- KEYS: user prefix, lifecycle state hash, access zset
-- ARGV: now, JSON {types = [...], subtypes = [...]} never promoted, fields...
-- Two filters run in Redis, so most items never cross the wire: items whose kind the
-- policy never promotes (counted, not sent) and items already settled for their current
-- fingerprint (queued, promoted, merged, dropped, retracted).
-- Returns ONE JSON string {rows, lifecycle records (flat), access hits (flat), never, settled}.
-- items not yet expired (expires_at > now), soonest expiry first: `expire` holds negated
-- expiries rounded up to whole seconds (common.lua), so the entries of the second `now` is
-- in (none when `now` is whole) are checked against their item's exact time
local now = tonumber(ARGV[1])
local boundary = -math.ceil(now)
local ids = {}
for _, id in ipairs(redis.call('ZREVRANGEBYSCORE', KEYS[1] .. 'expire', '(-' .. ARGV[1],
                               boundary)) do  -- the current second
  if (tonumber(redis.call('HGET', KEYS[1] .. 'item:' .. id, 'expires_at')) or now) > now then
    ids[#ids + 1] = id
  end
end
for _, id in ipairs(redis.call('ZREVRANGEBYSCORE', KEYS[1] .. 'expire', '(' .. boundary,
                               '-inf')) do
  ids[#ids + 1] = id
end
local never = cjson.decode(ARGV[2])
local skip_type, skip_sub = {}, {}
for _, t in ipairs(never.types) do skip_type[t] = true end
for _, t in ipairs(never.subtypes) do skip_sub[t] = true end
local fields = {}
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
local flat = redis.call('HGETALL', KEYS[2])
local settled = {}
for i = 1, #flat, 2 do
  local ok, rec = pcall(cjson.decode, flat[i + 1])
  if ok and rec[1] ~= 'new' then settled[flat[i]] = rec[2] end
end
local rows, n_never, n_settled = {}, 0, 0
for _, id in ipairs(ids) do
  local r = redis.call('HMGET', KEYS[1] .. 'item:' .. id, unpack(fields))
  -- fields[1] is 'id' and fields[9] 'fingerprint' (FIELDS in views.py); a compact item
  -- leaves its id out (the key says it), every item has a fingerprint
  if r[9] then
    r[1] = id
    if skip_type[r[5]] or skip_sub[r[6]] then
      n_never = n_never + 1
    elseif settled[id] and settled[id] == r[9] then
      n_settled = n_settled + 1
    else
      rows[#rows + 1] = r
    end
  end
end
local hits = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
return cjson.encode({rows, flat, hits, n_never, n_settled})
