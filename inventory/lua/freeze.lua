--[[ freeze: take units out of sale (a "take": Redis first, then MySQL).
KEYS[1] seckill:{sku}:stock   KEYS[2] seckill:{sku}:applied
ARGV[1] operation id   ARGV[2] units
Returns 1 taken, 0 refused (fewer available in Redis), 2 already applied,
-1 no snapshot (warm it first).
]]
if #KEYS ~= 2 or #ARGV ~= 2 then
  return redis.error_reply('freeze: expects 2 keys and 2 args')
end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return 2 end
local avail = redis.call('HGET', KEYS[1], 'available')
if not avail then return -1 end
local qty = tonumber(ARGV[2])
if tonumber(avail) < qty then return 0 end
redis.call('HINCRBY', KEYS[1], 'available', -qty)
redis.call('HINCRBY', KEYS[1], 'frozen', qty)
redis.call('SADD', KEYS[2], ARGV[1])
return 1
