-- Batch entry point of the upsert (issue 17): several items of ONE owner in one call, each
-- upserted in order exactly as upsert.lua does it alone.  The store prepends
-- "local function upsert_one(ARGV) <upsert.lua> end" (upsert.lua unchanged, its ARGV the
-- parameter), so one script call and one argument decode serve the whole batch.
-- ARGV[1..4] = per-session cap, history entries kept, per-owner cap, durable subtypes
-- (upsert.lua's ARGV[2..5]); ARGV[5..] = one item's JSON hash fields each.
-- Returns one upsert.lua reply per item, in order.
local BATCH = ARGV
local replies = {}
for i = 5, #BATCH do
  replies[#replies + 1] = upsert_one({BATCH[i], BATCH[1], BATCH[2], BATCH[3], BATCH[4]})
end
return replies
