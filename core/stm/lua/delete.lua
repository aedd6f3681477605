-- Delete items by id with every index entry and dedup mapping.  ARGV = ids.
-- Returns {the number of items that existed, items the owner still holds}.
local n = 0
for _, id in ipairs(ARGV) do n = n + unindex(id) end
return {n, owner_items()}
