--[[ warm: load a snapshot from MySQL, only where Redis has none.
Never overwrites a live snapshot: that would lose decrements in flight.
KEYS[1] seckill:{sku}:stock  KEYS[2] seckill:{sku}:buyers
KEYS[3] seckill:{sku}:idem   KEYS[4] seckill:{sku}:missing
ARGV[1..9] available, total, frozen, inflight, version, limit, starts_ms, ends_ms, status
ARGV[10] n = number of buyer pairs; then n pairs (user, units);
then pairs (idem field "user:key", "order_id|qty") to the end.
Returns 1 loaded, 0 a snapshot was already there (nothing changed).
]]
if #KEYS ~= 4 or #ARGV < 10 then
  return redis.error_reply('warm: expects 4 keys and at least 10 args')
end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1],
  'available', ARGV[1], 'total', ARGV[2], 'frozen', ARGV[3], 'inflight', ARGV[4],
  'version', ARGV[5], 'limit', ARGV[6], 'starts', ARGV[7], 'ends', ARGV[8], 'status', ARGV[9])
local n = tonumber(ARGV[10])
local i = 11
for _ = 1, n do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
while i + 1 <= #ARGV do
  redis.call('HSETNX', KEYS[3], ARGV[i], ARGV[i + 1])
  i = i + 2
end
redis.call('DEL', KEYS[4])
return 1
