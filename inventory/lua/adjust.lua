--[[ adjust: a reconciliation repair of the available figure, by a delta.
Idempotent by repair id. Lowering never goes below zero.
KEYS[1] seckill:{sku}:stock  KEYS[2] seckill:{sku}:applied
ARGV[1] repair id  ARGV[2] delta (negative lowers)
Returns the new available, or false when already applied or no snapshot.
]]
if #KEYS ~= 2 or #ARGV ~= 2 then
  return redis.error_reply('adjust: expects 2 keys and 2 args')
end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return false end
local avail = redis.call('HGET', KEYS[1], 'available')
if not avail then return false end
local delta = tonumber(ARGV[2])
if tonumber(avail) + delta < 0 then delta = -tonumber(avail) end
redis.call('SADD', KEYS[2], ARGV[1])
return redis.call('HINCRBY', KEYS[1], 'available', delta)
