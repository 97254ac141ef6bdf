--[[ rebuild: drop a SKU's snapshot so the next warm-up reloads it from MySQL,
only while nothing is in flight (a reservation not yet in MySQL would be lost).
KEYS[1] seckill:{sku}:stock  KEYS[2] seckill:{sku}:inflight  KEYS[3] seckill:{sku}:buyers
KEYS[4] seckill:{sku}:idem   KEYS[5] seckill:{sku}:applied
Returns 1 dropped, 0 refused (reservations in flight).
]]
if #KEYS ~= 5 or #ARGV ~= 0 then
  return redis.error_reply('rebuild: expects 5 keys and no args')
end
if redis.call('HLEN', KEYS[2]) > 0 then return 0 end
local inflight = tonumber(redis.call('HGET', KEYS[1], 'inflight') or '0')
if inflight > 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4], KEYS[5])
return 1
