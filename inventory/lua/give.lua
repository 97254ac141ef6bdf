--[[ give: put units back on sale after MySQL committed their return.
Idempotent by operation id: a give delivered twice restores once.
KEYS[1] seckill:{sku}:stock   KEYS[2] seckill:{sku}:buyers
KEYS[3] seckill:{sku}:applied  set of give operation ids already applied
ARGV[1] operation id  ARGV[2] quantity  ARGV[3] user id whose per-user count
comes back ("" for none)
Returns 1 applied, 0 already applied, -1 no snapshot (the next warm-up reads
MySQL, which already includes this give, so nothing is lost).
]]
if #KEYS ~= 3 or #ARGV ~= 3 then
  return redis.error_reply('give: expects 3 keys and 3 args')
end
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local qty = tonumber(ARGV[2])
redis.call('HINCRBY', KEYS[1], 'available', qty)
if ARGV[3] ~= '' then
  local left = redis.call('HINCRBY', KEYS[2], ARGV[3], -qty)
  if left <= 0 then redis.call('HDEL', KEYS[2], ARGV[3]) end
end
redis.call('SADD', KEYS[3], ARGV[1])
return 1
