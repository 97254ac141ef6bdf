--[[ observe: one consistent reading of a SKU's gate, for reconciliation.
KEYS[1] stock  KEYS[2] inflight  KEYS[3] applied (marker zset)
ARGV[1..] op_ids: gives not yet known to be applied, to test for "applied"
Returns {available or false, {order_id, entry, ...}, {1|0 per operation id}};
available is false when the SKU has no snapshot.
]]
if #KEYS ~= 3 then
  return redis.error_reply('observe: expects 3 keys')
end
local avail = redis.call('HGET', KEYS[1], 'available')
local flags = {}
for i = 1, #ARGV do
  flags[i] = marker_has(KEYS[3], ARGV[i]) and 1 or 0
end
return {avail or false, redis.call('HGETALL', KEYS[2]), flags}
