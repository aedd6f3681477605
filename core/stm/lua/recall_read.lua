-- One round trip for recall: the newest ids of several indexes, deduplicated in order,
-- with only the fields recall ranks on; expired and missing items skipped; and any other
-- keys of the owner recall reads (the profile cache's entry and version).
-- ARGV[1] = limit per index, ARGV[2] = now, ARGV[3] = last-recall flag key suffix ('' = none),
-- ARGV[4] = n, ARGV[5..4+n] = suffixes of string keys to GET (relative to the user prefix),
-- ARGV[5+n..] = index suffixes (relative to the user prefix).
-- Returns {flag_or_false, value_or_false x n, id, f1..f10, id, f1..f10, ...}
local limit = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local flag = false
if ARGV[3] ~= '' then flag = redis.call('GET', P .. ARGV[3]) end
local n_get = tonumber(ARGV[4])
local out = {flag}
for i = 5, 4 + n_get do out[#out + 1] = redis.call('GET', P .. ARGV[i]) end
local seen = {}
for i = 5 + n_get, #ARGV do
  local ids = redis.call('ZRANGE', P .. ARGV[i], 0, limit - 1)  -- newest first
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
