-- The per-tenant cap's accounting (one tenant, its own hash tag; not prefixed by common.lua).
-- KEYS[1] = <ns>:tenant:{<t>}:users (ZSET user -> items), KEYS[2] = <ns>:tenant:{<t>}:items
-- ARGV = user_id, items, user_id, items, ...: each user's count as its owner script saw it
-- (0 removes the user). Returns {tenant items, heaviest user or '', its items}.
local total = tonumber(redis.call('GET', KEYS[2]) or '0')
for i = 1, #ARGV, 2 do
  local old = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[i]) or '0')
  local new = tonumber(ARGV[i + 1])
  if new > 0 then
    redis.call('ZADD', KEYS[1], new, ARGV[i])
  else
    redis.call('ZREM', KEYS[1], ARGV[i])
  end
  total = total + new - old
end
if total < 0 then total = 0 end
redis.call('SET', KEYS[2], total)
local top = redis.call('ZREVRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {total, top[1] or '', tonumber(top[2] or '0')}
