--[[ observe: one consistent reading of a SKU's gate, for reconciliation.
KEYS[1] seckill:{sku}:stock  KEYS[2] seckill:{sku}:inflight  KEYS[3] seckill:{sku}:applied
ARGV: give operation ids to test for "applied"
Returns {available or false, {order_id, entry, ...}, {1|0 per give id}};
available is false when the SKU has no snapshot.
]]
if #KEYS ~= 3 then
  return redis.error_reply('observe: expects 3 keys')
end
local avail = redis.call('HGET', KEYS[1], 'available')
local flags = {}
for i = 1, #ARGV do
  flags[i] = redis.call('SISMEMBER', KEYS[3], ARGV[i])
end
return {avail or false, redis.call('HGETALL', KEYS[2]), flags}
