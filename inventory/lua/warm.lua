--[[ warm: load a snapshot from MySQL, only where Redis has none.
Never overwrites a live snapshot: that would lose decrements in flight.
KEYS[1] seckill:{sku}:stock  KEYS[2] seckill:{sku}:buyers  KEYS[3] seckill:{sku}:idem
KEYS[4] seckill:{sku}:missing  KEYS[5] seckill:{sku}:applied
ARGV[1..9] available, total, frozen, inflight, version, limit, starts_ms, ends_ms, status
ARGV[10] b = number of buyer pairs, then b pairs (user, units);
then i = number of idempotency pairs, then i pairs ("user:key", "order_id|qty");
then, to the end, the ids of gives the snapshot already counts (marked applied).
Returns 1 loaded, 0 a snapshot was already there (nothing changed).
]]
if #KEYS ~= 5 or #ARGV < 11 then
  return redis.error_reply('warm: expects 5 keys and at least 11 args')
end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1],
  'available', ARGV[1], 'total', ARGV[2], 'frozen', ARGV[3], 'inflight', ARGV[4],
  'version', ARGV[5], 'limit', ARGV[6], 'starts', ARGV[7], 'ends', ARGV[8], 'status', ARGV[9])
local i = 10
local b = tonumber(ARGV[i])
i = i + 1
for _ = 1, b do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
local n = tonumber(ARGV[i])
i = i + 1
for _ = 1, n do
  redis.call('HSETNX', KEYS[3], ARGV[i], ARGV[i + 1])
  i = i + 2
end
while i <= #ARGV do
  redis.call('SADD', KEYS[5], ARGV[i])
  i = i + 1
end
redis.call('DEL', KEYS[4])
return 1
