-- Bounded expire sweep for one user (seed 十七.3): remove up to ARGV[2] items whose
-- expires_at <= ARGV[1] from the item store and from every index.
-- Returns {removed_count, next_expiry_or_empty_string}.
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local ids = redis.call('ZRANGEBYSCORE', P .. 'expire', '-inf', now, 'LIMIT', 0, limit)
local removed = 0
for _, id in ipairs(ids) do
  removed = removed + unindex(id)
  redis.call('ZREM', P .. 'expire', id)
end
local nxt = redis.call('ZRANGE', P .. 'expire', 0, 0, 'WITHSCORES')
if #nxt == 0 then return {removed, ''} end
return {removed, nxt[2]}
