-- Batch entry point of the upsert (issue 17): several items of ONE owner in one call, each
-- upserted in order exactly as upsert_one.lua does it alone (upsert.lua precedes it), so
-- one script call, one argument decode and one set of helpers serve the whole batch.
-- ARGV[1..4] = per-session cap, history entries kept, per-owner cap, durable subtypes
-- (upsert.lua configure); ARGV[5..] = one item's JSON hash fields each.
-- Returns one upsert_item reply per item, in order.
configure(ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local replies = {}
for i = 5, #ARGV do replies[#replies + 1] = upsert_item(ARGV[i]) end
return replies
