--[[ give: apply a stock move that MySQL already committed (a "give").
Idempotent by operation id: a give delivered twice restores once.
KEYS[1] seckill:{sku}:stock   KEYS[2] seckill:{sku}:buyers
KEYS[3] seckill:{sku}:applied  set of operation ids already applied
ARGV[1] operation id  ARGV[2] units back on sale (available, >= 0)
ARGV[3] user id whose per-user count comes back ("" for none)
ARGV[4] change of total  ARGV[5] change of frozen (restock, unfreeze, write-off)
Returns 1 applied, 0 already applied, -1 no snapshot (the next warm-up reads
MySQL, which already includes this move, so nothing is lost).
]]
if #KEYS ~= 3 or #ARGV ~= 5 then
  return redis.error_reply('give: expects 3 keys and 5 args')
end
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local qty = tonumber(ARGV[2])
if qty ~= 0 then redis.call('HINCRBY', KEYS[1], 'available', qty) end
if ARGV[3] ~= '' and qty > 0 then
  local left = redis.call('HINCRBY', KEYS[2], ARGV[3], -qty)
  if left <= 0 then redis.call('HDEL', KEYS[2], ARGV[3]) end
end
local total, frozen = tonumber(ARGV[4]), tonumber(ARGV[5])
if total ~= 0 then redis.call('HINCRBY', KEYS[1], 'total', total) end
if frozen ~= 0 then redis.call('HINCRBY', KEYS[1], 'frozen', frozen) end
redis.call('SADD', KEYS[3], ARGV[1])
return 1
