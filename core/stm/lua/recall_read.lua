-- One round trip for recall: the newest ids of several indexes, deduplicated in order,
-- with only the fields recall ranks on; expired and missing items skipped.
-- ARGV[1] = limit per index, ARGV[2] = now, ARGV[3] = last-recall flag key suffix ('' = none),
-- ARGV[4..] = index suffixes (relative to the user prefix).
-- Returns {flag_or_false, id, f1..f10, id, f1..f10, ...}
local limit = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local flag = false
if ARGV[3] ~= '' then flag = redis.call('GET', P .. ARGV[3]) end
local out = {flag}
local seen = {}
for i = 4, #ARGV do
  local ids = redis.call('ZREVRANGE', P .. ARGV[i], 0, limit - 1)
  for _, id in ipairs(ids) do
    if not seen[id] then
      seen[id] = true
      local f = redis.call('HMGET', P .. 'item:' .. id, 'summary', 'canonical_fact_key',
        'fingerprint', 'memory_type', 'importance', 'updated_at', 'entities', 'source',
        'task_id', 'expires_at')
      if f[1] and tonumber(f[10]) > now then
        out[#out + 1] = id
        for k = 1, 10 do out[#out + 1] = f[k] or '' end
      end
    end
  end
end
return out
