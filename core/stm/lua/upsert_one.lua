-- Entry point of one item's upsert (StmStore.upsert_many; upsert.lua precedes it).
-- ARGV[1] = the item's JSON hash fields; ARGV[2..5] = per-session cap, history entries
-- kept, per-owner cap, durable subtypes (upsert.lua configure).
configure(ARGV[2], ARGV[3], ARGV[4], ARGV[5])
return upsert_item(ARGV[1])
