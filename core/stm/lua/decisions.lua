-- Record one session's write decisions, write-once (a redelivered turn must not rewrite why
-- it was, or was not, stored), and push the hash's expiry: one call per session hash of a
-- batch instead of one HSETNX per candidate.
-- KEYS[1] = <ns>:user:{<u>}:decisions:<session_id>
-- ARGV = ttl_s, decision_id, record, decision_id, record, ...
for i = 2, #ARGV, 2 do
  redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 0
