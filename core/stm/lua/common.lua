-- Shared helpers, prepended to every STM script.  KEYS[1] is the user's key prefix
-- ("<ns>:user:{<user_id>}:"); every key touched shares its hash tag.

local P = KEYS[1]

-- Index order (docs/KEYS.md): the item indexes (`recent`, `session:`, `task:`, `entity:`)
-- score an entry by its item's NEGATED updated_at and `expire` by the negated expires_at
-- (in whole seconds, below), so the head of each is the newest item (the latest expiry)
-- and a new item's entry goes first.  An owner's sorted sets are listpacks
-- (ops/redis.conf), whose ZADD scans for the score's place from the head: at the head the
-- scan stops at once, at the tail it reads every entry (issue 17: ~0.45 ms of Redis CPU
-- a drained turn).  Readers take newest first with ZRANGE; entries with a positive score
-- were written before 2026-12-07 and are turned by `memstrata migrate`
-- (core/stm/index_order.py); until then the sweep and the promotion scan leave them alone.

-- `expire` holds whole seconds (issue 17): a listpack keeps an integral score as an
-- integer and reads it back without parsing, while a fractional one is printed on every
-- insert and parsed again (strtod) at every entry an insert or a range walks past, and an
-- expire insert lands anywhere in the list (the order is the kind's TTL, not the write
-- time).  The expiry is rounded up: the sweep takes an item at most a second late, never
-- early; the promotion scan checks the exact time within the boundary second.  A Lua
-- number: Redis passes a whole number on as its digits, and ZADD stores it as an integer.
local function expire_score(expires_at)
  return -math.ceil(tonumber(expires_at))
end

-- A time index's score: the negated time as written (a plain decimal, as the store
-- writes every time), without a conversion to a number and back; anything else through
-- tonumber, as before.
local function time_score(at)
  if string.find(at, '^%d+%.?%d*$') then return '-' .. at end
  return -tonumber(at)
end

-- Per-session eviction order (DESIGN §3 addition): ZSET id -> importance, then updated_at,
-- in one score (importance to 4 decimals above the timestamp), so the per-session cap
-- evicts with one ZRANGE instead of reading every item of a full session.
local function evict_key(session_suffix)
  return P .. 'evict:' .. string.sub(session_suffix, 9)  -- 'session:' is 8 characters
end

-- Least important, then oldest, first; a durable statement (one that becomes an episode
-- card when its session ends) only after every item of task state.
local function evict_score(importance, updated_at, durable)
  local score = math.floor((tonumber(importance) or 0) * 10000) * 1e10 + (tonumber(updated_at) or 0)
  if durable then score = score + 1e15 end
  return score
end

-- The index suffixes an item hash lists (docs/KEYS.md "Compact items"): compact, `ix`
-- holds only those its own fields do not imply, space-separated (no suffix has a space):
-- `recent`, `session:<session_id>` and `task:<task_id>` are implied.  A hash written
-- before 2026-12-02 has `_idx`, the JSON list of every suffix, and reads the same.
-- Returns nil when the hash has neither (no item).
local function suffixes_of(idx, ix, session_id, task_id)
  if idx then return cjson.decode(idx) end
  if not ix then return nil end
  local out = {'recent', 'session:' .. session_id}
  if task_id and task_id ~= '' then out[#out + 1] = 'task:' .. task_id end
  for s in string.gmatch(ix, '%S+') do out[#out + 1] = s end
  return out
end

local IDX_FIELDS = {'_idx', 'ix', 'session_id', 'task_id'}

local function unindex(id)
  -- Remove an item from every index it was written to, and the item itself.
  local ikey = P .. 'item:' .. id
  local fields = redis.call('HMGET', ikey, '_idx', 'canonical_fact_key', 'fingerprint',
                            unpack(IDX_FIELDS, 2))
  local suffixes = suffixes_of(fields[1], fields[4], fields[5], fields[6])
  if suffixes then
    for _, suffix in ipairs(suffixes) do
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

-- Per-owner cap (STM_USER_CAP, and the tenant cap through evict.lua): which items go.
-- The candidates are the owner's least recently updated items (the tail of `recent`,
-- EVICT_SAMPLE more than are needed); of those the least important go first, ties the
-- older. No index of its own: a bounded read of the candidates' importance instead.
local EVICT_SAMPLE = 16

local function evict_from_owner(count)
  local evicted = {}
  while #evicted < count do
    local want = count - #evicted
    local cands = redis.call('ZRANGE', P .. 'recent', 0, want + EVICT_SAMPLE - 1, 'REV')
    if #cands == 0 then break end
    local scored = {}
    for i, mid in ipairs(cands) do
      -- an index entry whose item is gone (-1) is dropped first
      local imp = tonumber(redis.call('HGET', P .. 'item:' .. mid, 'importance')) or -1
      scored[#scored + 1] = {imp, i, mid}
    end
    table.sort(scored, function(a, b)
      if a[1] ~= b[1] then return a[1] < b[1] end
      return a[2] < b[2]
    end)
    for j = 1, math.min(want, #scored) do
      local mid = scored[j][3]
      unindex(mid)
      redis.call('ZREM', P .. 'recent', mid)
      evicted[#evicted + 1] = mid
    end
  end
  return evicted
end

local function owner_items()
  return redis.call('ZCARD', P .. 'expire')
end
