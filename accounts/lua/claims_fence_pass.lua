--[[ claims_fence_pass: the claims fence's message came out of the confirm
queue: every reservation ahead of it is in MySQL. Drop the fence if it is
still this one (a copy of a passed fence, or one of an earlier loss, changes
nothing).
KEYS[1] <prefix>:{<shard tag>}:claims-fence
ARGV[1] the fence
Returns 1 passed, 0 not this fence.
]]
if #KEYS ~= 1 or #ARGV ~= 1 then
  return redis.error_reply('claims_fence_pass: expects 1 key and 1 arg')
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
