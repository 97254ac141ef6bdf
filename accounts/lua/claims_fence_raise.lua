--[[ claims_fence_raise: a shard's token claims were lost (a new instance, or
a wipe). While its claims fence stands, a token of this shard whose record
must be filled from MySQL is answered 503: the reservations its lost claims
named may still be in the broker, not yet in MySQL. The fence passes when its
message comes out of the confirm queue, behind all of them
(claims_fence_pass.lua), in every partition of it.
KEYS[1] fence   <prefix>:{<shard tag>}:claims-fence, "<id>|<not before ms>"
KEYS[2] passed  <prefix>:{<shard tag>}:claims-fence:passed, the partitions a copy passed (cleared)
ARGV[1] fence_id: a new id  ARGV[2] delay_ms before the fence may be sent
Returns the fence.
]]
if #KEYS ~= 2 or #ARGV ~= 2 then
  return redis.error_reply('claims_fence_raise: expects 2 keys and 2 args')
end
local token = ARGV[1] .. '|' .. (now_ms() + tonumber(ARGV[2]))
redis.call('SET', KEYS[1], token)
redis.call('DEL', KEYS[2])
return token
