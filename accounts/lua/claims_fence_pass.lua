--[[ claims_fence_pass: a copy of the claims fence came out of one partition of
the confirm stream: every reservation ahead of it in that partition is in
MySQL. The claims named reservations of any SKU, so the fence is lifted only
once a copy has passed in every partition (recorded in `passed`, which the
raise clears). A copy of a passed fence, or one of an earlier loss, changes
nothing.
KEYS[1] fence   <prefix>:{<shard tag>}:claims-fence
KEYS[2] passed  <prefix>:{<shard tag>}:claims-fence:passed, set of the partitions passed
ARGV[1] token: the fence's  ARGV[2] partition: this copy's  ARGV[3] partitions: how many
Returns 1 passed (lifted), 0 not this fence, 2 this partition recorded, others
still to pass.
]]
if #KEYS ~= 2 or #ARGV ~= 3 then
  return redis.error_reply('claims_fence_pass: expects 2 keys and 3 args')
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SADD', KEYS[2], ARGV[2])
local passed = 0
for _, p in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if tonumber(p) < tonumber(ARGV[3]) then passed = passed + 1 end
end
if passed < tonumber(ARGV[3]) then
  return 2
end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
