-- Atomic STM upsert (DESIGN §3): dedup by canonical_fact_key, then fingerprint; insert,
-- merge a restated fact, or bump the version of a changed one (old content kept in
-- `history`); write the item, every index and the expiry; enforce the per-session cap.
-- Defines upsert_item(payload) and configure(...); an entry script follows it
-- (upsert_one.lua: one item, upsert_batch.lua: the items of one owner), so the helpers
-- below are built once a call, not once an item (issue 17).
-- configure(per-session cap, history entries kept, per-owner cap (0 = none), JSON list
-- of durable subtypes (evicted after all task state)) sets the call's settings;
-- upsert_item(JSON object of the new item's hash fields, all strings, incl. `_idx`)
-- returns {op, id, version, items the owner holds after the write, evicted_id...};
-- op = inserted | merged | updated | unchanged | stale (older than the stored version)
--
-- Compact items (docs/KEYS.md): the hash leaves out what its key or its other fields
-- already say (id, user_id, tenant_id, status) and every field at its default; expand()
-- puts them back for the merge logic, compact() takes them out before the write.
-- Hashes written before (with every field) are read the same and compacted when rewritten.
-- The index list is kept as `ix` (common.lua suffixes_of); the merge logic works on the
-- full JSON list `_idx`, as the payload from Python carries it.

local cap, hist_cap, owner_cap, durable

local function configure(session_cap, history_cap, per_owner_cap, durable_json)
  cap = tonumber(session_cap)
  hist_cap = tonumber(history_cap)
  owner_cap = tonumber(per_owner_cap) or 0
  durable = {}
  for _, sub in ipairs(cjson.decode(durable_json or '[]')) do durable[sub] = true end
end

local DEFAULTS = {version = '1', mention_count = '1', history = '[]', entities = '[]',
                  tags = '[]', detail = '{}', subtype = 'general'}
local EMPTY = {['[]'] = true, ['{}'] = true}

local function expand(t)
  for k, v in pairs(DEFAULTS) do if t[k] == nil then t[k] = v end end
  if t._idx == nil and t.ix ~= nil then
    t._idx = cjson.encode(suffixes_of(nil, t.ix, t.session_id, t.task_id))
  end
  t.ix = nil
  if t.seen_sessions == nil then t.seen_sessions = cjson.encode({t.session_id}) end
  if t.created_at == nil then t.created_at = t.updated_at end
  if t.last_access_at == nil then t.last_access_at = t.updated_at end
  return t
end

local function compact_idx(t)
  -- `_idx` -> `ix` without the implied suffixes (suffixes_of puts them back); the full
  -- list stays when one of them is missing (an update that moved the item's task)
  local implied = {recent = true, ['session:' .. t.session_id] = true}
  if t.task_id and t.task_id ~= '' then implied['task:' .. t.task_id] = true end
  local found, extra = {}, {}
  for _, s in ipairs(cjson.decode(t._idx)) do
    if implied[s] then found[s] = true else extra[#extra + 1] = s end
  end
  for s in pairs(implied) do if not found[s] then return end end
  t._idx = nil
  t.ix = table.concat(extra, ' ')
end

local function compact(t)
  t.id, t.user_id, t.tenant_id, t.status = nil, nil, nil, nil
  compact_idx(t)
  for k, v in pairs(DEFAULTS) do
    if t[k] == v or (EMPTY[v] and EMPTY[t[k]]) then t[k] = nil end
  end
  if t.seen_sessions == cjson.encode({t.session_id}) or EMPTY[t.seen_sessions] then
    t.seen_sessions = nil
  end
  if t.created_at == t.updated_at then t.created_at = nil end
  if t.last_access_at == t.updated_at then t.last_access_at = nil end
  return t
end

local function compact_source(src)
  -- provenance without its defaults: kind "conversation", empty id lists
  if src.kind == 'conversation' then src.kind = nil end
  for _, k in ipairs({'message_ids', 'tool_call_ids'}) do
    if src[k] ~= nil and next(src[k]) == nil then src[k] = nil end
  end
  return cjson.encode(src)
end

local function contains(list, value)
  for _, v in ipairs(list) do if v == value then return true end end
  return false
end

local function union(a, b, limit)
  local out = {}
  for _, v in ipairs(a) do if not contains(out, v) then out[#out + 1] = v end end
  for _, v in ipairs(b) do
    if #out >= limit then break end
    if not contains(out, v) then out[#out + 1] = v end
  end
  return out
end

local function rewrite_hash(key, stored, tbl)
  -- `stored` (the HGETALL reply the merge read; {} for a new key) becomes exactly `tbl`:
  -- only the fields that changed are set and the ones compacted away removed, the same
  -- fields as a DEL and an HSET of every field (issue 17: a merge used to rebuild the
  -- hash field by field)
  local old = {}
  for i = 1, #stored, 2 do old[stored[i]] = stored[i + 1] end
  local set, gone = {}, {}
  for k, v in pairs(tbl) do
    if old[k] ~= v then set[#set + 1] = k; set[#set + 1] = v end
    old[k] = nil
  end
  for k in pairs(old) do gone[#gone + 1] = k end
  if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
  if #set > 0 then redis.call('HSET', key, unpack(set)) end
end

local function without_type(suffixes)
  -- hashes written before 2026-12 list a 'type:<t>' index, which is no longer kept: the
  -- merge path removes the old entry (cur._idx) and does not write it again
  local out = {}
  for _, s in ipairs(suffixes) do
    if string.sub(s, 1, 5) ~= 'type:' then out[#out + 1] = s end
  end
  return out
end

local function index(id, item, canon_holds)
  -- negated times (common.lua, "Index order"): the newest entry goes to the head
  local score = time_score(item.updated_at)
  local escore = evict_score(item.importance, item.updated_at, durable[item.subtype or 'general'])
  for _, suffix in ipairs(cjson.decode(item._idx)) do
    redis.call('ZADD', P .. suffix, score, id)
    if string.sub(suffix, 1, 8) == 'session:' then
      redis.call('ZADD', evict_key(suffix), escore, id)
    end
  end
  redis.call('ZADD', P .. 'expire', expire_score(item.expires_at), id)
  -- `canon_holds`: the lookup above just read this very mapping (a full owner's map is
  -- a 500-field listpack, and writing a field walks it)
  if not canon_holds then redis.call('HSET', P .. 'canon', item.canonical_fact_key, id) end
  redis.call('HSET', P .. 'fp', item.fingerprint, id)
end

local function enforce_cap(session_suffix)
  local skey = P .. session_suffix
  local n = redis.call('ZCARD', skey)
  local evicted = {}
  if n <= cap then return evicted end
  -- least important first, then oldest: the order of the session's eviction zset
  for _, mid in ipairs(redis.call('ZRANGE', evict_key(session_suffix), 0, n - cap - 1)) do
    unindex(mid)
    redis.call('ZREM', skey, mid)
    evicted[#evicted + 1] = mid
  end
  return evicted
end

local function upsert_item(payload)
  local new = cjson.decode(payload)
  local existing = redis.call('HGET', P .. 'canon', new.canonical_fact_key)
  local matched_by = 'canon'
  if not existing then
    existing = redis.call('HGET', P .. 'fp', new.fingerprint)
    matched_by = 'fp'
  end
  if existing and redis.call('EXISTS', P .. 'item:' .. existing) == 0 then
    existing = false  -- stale mapping to an item already swept or evicted
  end

  local op, id, version
  if not existing then
    id = new.id
    version = 1
    local ikey = P .. 'item:' .. id
    if redis.call('EXISTS', ikey) == 1 then
      unindex(id)  -- a leftover with the same id (e.g. a redelivery after eviction)
      -- (with no hash there is nothing to unindex: index() rewrites the expiry's entry)
    end
    index(id, new)
    rewrite_hash(ikey, {}, compact(new))  -- a new key: every field is set, none removed
    op = 'inserted'
  else
    id = existing
    local ikey = P .. 'item:' .. id
    local flat = redis.call('HGETALL', ikey)
    local cur = {}
    for i = 1, #flat, 2 do cur[flat[i]] = flat[i + 1] end
    expand(cur)
    expand(new)
    local cur_src = cjson.decode(cur.source)
    local new_src = cjson.decode(new.source)
    local cur_msgs = cur_src.message_ids or {}
    local seen_all = #(new_src.message_ids or {}) > 0
    for _, m in ipairs(new_src.message_ids or {}) do
      if not contains(cur_msgs, m) then seen_all = false end
    end
    local hist = cjson.decode(cur.history)
    for _, h in ipairs(hist) do
      for _, m in ipairs(h.message_ids or {}) do
        if contains(new_src.message_ids or {}, m) then seen_all = true end
      end
    end
    if seen_all then
      return {'unchanged', id, cur.version, owner_items()}
    end
    if cur.fingerprint ~= new.fingerprint and matched_by == 'canon'
        and tonumber(new.updated_at) < tonumber(cur.updated_at) then
      -- an older version delivered late (two drains raced): keep the newer content and
      -- file the late one under history so a redelivery is recognised
      hist[#hist + 1] = {version = 0, summary = new.summary, fingerprint = new.fingerprint,
                         updated_at = tonumber(new.updated_at),
                         message_ids = new_src.message_ids or {}}
      while #hist > hist_cap do table.remove(hist, 1) end
      redis.call('HSET', ikey, 'history', cjson.encode(hist))
      return {'stale', id, cur.version, owner_items()}
    end
    local old_suffixes = cjson.decode(cur._idx)
    local merged = {}
    for k, v in pairs(cur) do merged[k] = v end
    local sessions = union(cjson.decode(cur.seen_sessions), cjson.decode(new.seen_sessions), 32)
    if cur.fingerprint == new.fingerprint or matched_by == 'fp' then
      -- the same fact said again: keep content, merge provenance and indexes
      cur_src.message_ids = union(cur_msgs, new_src.message_ids or {}, 256)
      cur_src.tool_call_ids = union(cur_src.tool_call_ids or {}, new_src.tool_call_ids or {}, 256)
      merged.source = compact_source(cur_src)
      merged.entities = cjson.encode(union(cjson.decode(cur.entities), cjson.decode(new.entities), 64))
      merged.tags = cjson.encode(union(cjson.decode(cur.tags), cjson.decode(new.tags), 32))
      if tonumber(new.importance) > tonumber(cur.importance) then merged.importance = new.importance end
      if tonumber(new.confidence) > tonumber(cur.confidence) then merged.confidence = new.confidence end
      if tonumber(new.expires_at) > tonumber(cur.expires_at) then merged.expires_at = new.expires_at end
      merged._idx = cjson.encode(union(without_type(cjson.decode(cur._idx)),
                                       cjson.decode(new._idx), 128))
      op = 'merged'
    else
      -- the fact changed: bump the version and keep the old content as provenance
      hist[#hist + 1] = {version = tonumber(cur.version), summary = cur.summary,
                         fingerprint = cur.fingerprint, updated_at = tonumber(cur.updated_at),
                         message_ids = cur_msgs}
      while #hist > hist_cap do table.remove(hist, 1) end
      for k, v in pairs(new) do
        if k ~= 'id' and k ~= 'created_at' then merged[k] = v end
      end
      merged.history = cjson.encode(hist)
      merged.version = tostring(tonumber(cur.version) + 1)
      if redis.call('HGET', P .. 'fp', cur.fingerprint) == id then
        redis.call('HDEL', P .. 'fp', cur.fingerprint)
      end
      op = 'updated'
    end
    merged.seen_sessions = cjson.encode(sessions)
    merged.session_id = new.session_id
    if new.task_id then merged.task_id = new.task_id end
    if tonumber(new.updated_at) > tonumber(cur.updated_at) then
      -- a restatement delivered late counts as a mention but does not make the item older
      merged.updated_at = new.updated_at
      merged.last_access_at = new.last_access_at
    end
    merged.mention_count = tostring(tonumber(cur.mention_count) + 1)
    merged.canonical_fact_key = cur.canonical_fact_key
    -- index() re-scores the entries the item keeps (ZADD updates in place, the expire
    -- entry too); only an index the item leaves is removed from (issue 17: one command
    -- per index instead of a ZREM and a ZADD each)
    local kept = {}
    for _, suffix in ipairs(cjson.decode(merged._idx)) do kept[suffix] = true end
    for _, suffix in ipairs(old_suffixes) do
      if not kept[suffix] then
        redis.call('ZREM', P .. suffix, id)
        if string.sub(suffix, 1, 8) == 'session:' then redis.call('ZREM', evict_key(suffix), id) end
      end
    end
    index(id, merged, matched_by == 'canon' and merged.canonical_fact_key == new.canonical_fact_key)
    version = merged.version
    rewrite_hash(ikey, flat, compact(merged))
  end

  local evicted = enforce_cap('session:' .. new.session_id)
  if owner_cap > 0 then
    local over = owner_items() - owner_cap
    if over > 0 then
      for _, e in ipairs(evict_from_owner(over)) do evicted[#evicted + 1] = e end
    end
  end
  local out = {op, id, tostring(version), owner_items()}
  for _, e in ipairs(evicted) do out[#out + 1] = e end
  return out
end
