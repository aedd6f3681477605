-- Evict up to ARGV[1] items of one owner in the per-owner cap's order (common.lua:
-- evict_from_owner), for the per-tenant cap (StmStore._enforce_tenant_caps).
-- Returns {items left, evicted id...}.
local evicted = evict_from_owner(math.min(tonumber(ARGV[1]), owner_items()))
local out = {owner_items()}
for _, e in ipairs(evicted) do out[#out + 1] = e end
return out
