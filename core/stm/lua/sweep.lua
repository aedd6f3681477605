-- Bounded expire sweep for one user (seed 十七.3): remove up to ARGV[2] items whose
-- expiry, rounded up to the second as `expire` files it (common.lua), is <= ARGV[1],
-- from the item store and from every index, batched: one variadic
-- ZREM per index (per-session eviction zsets included), one HMGET + HDEL per dedup map,
-- one DEL for the items, instead of ~13 calls per item in unindex().  A mapping is deleted
-- only while it still points at the swept item.
-- Returns {removed_count, next_expiry_or_empty_string, items the owner still holds}.
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
-- `expire` scores are negated (common.lua, "Index order"): expired is a score >= -now, the
-- longest expired first; the bound (0 leaves entries of the earlier order alone
local ids = redis.call('ZREVRANGEBYSCORE', P .. 'expire', '(0', -now, 'LIMIT', 0, limit)
local function chunks(list, fn)
  for i = 1, #list, 1000 do fn(i, math.min(i + 999, #list)) end
end
local by_index, keys = {}, {}
local canon_f, canon_id, fp_f, fp_id = {}, {}, {}, {}
for _, id in ipairs(ids) do
  local ikey = P .. 'item:' .. id
  local f = redis.call('HMGET', ikey, '_idx', 'canonical_fact_key', 'fingerprint',
                       unpack(IDX_FIELDS, 2))
  local suffixes = suffixes_of(f[1], f[4], f[5], f[6])
  if suffixes then
    for _, suffix in ipairs(suffixes) do
      local l = by_index[suffix]
      if not l then l = {}; by_index[suffix] = l end
      l[#l + 1] = id
    end
    for _, suffix in ipairs(suffixes) do
      if string.sub(suffix, 1, 8) == 'session:' then
        local ek = 'evict:' .. string.sub(suffix, 9)
        local l = by_index[ek]
        if not l then l = {}; by_index[ek] = l end
        l[#l + 1] = id
      end
    end
  end
  if f[2] then canon_f[#canon_f + 1] = f[2]; canon_id[#canon_id + 1] = id end
  if f[3] then fp_f[#fp_f + 1] = f[3]; fp_id[#fp_id + 1] = id end
  keys[#keys + 1] = ikey
end
for suffix, l in pairs(by_index) do
  chunks(l, function(i, j) redis.call('ZREM', P .. suffix, unpack(l, i, j)) end)
end
local function unmap(h, fields, owners)
  chunks(fields, function(i, j)
    local cur = redis.call('HMGET', P .. h, unpack(fields, i, j))
    local del = {}
    for k = i, j do if cur[k - i + 1] == owners[k] then del[#del + 1] = fields[k] end end
    if #del > 0 then redis.call('HDEL', P .. h, unpack(del)) end
  end)
end
unmap('canon', canon_f, canon_id)
unmap('fp', fp_f, fp_id)
local removed = 0
chunks(keys, function(i, j) removed = removed + redis.call('DEL', unpack(keys, i, j)) end)
chunks(ids, function(i, j) redis.call('ZREM', P .. 'expire', unpack(ids, i, j)) end)
local nxt = redis.call('ZREVRANGEBYSCORE', P .. 'expire', '(0', '-inf', 'LIMIT', 0, 1, 'WITHSCORES')
if #nxt == 0 then return {removed, '', owner_items()} end
return {removed, string.sub(nxt[2], 2), owner_items()}  -- the score without its minus
