--[[ meta: apply an ops edit of sale data (limit, window, status, version).
Stock fields are never written here: stock only moves by deltas.
KEYS[1] seckill:{sku}:stock
ARGV[1] limit  ARGV[2] starts_ms  ARGV[3] ends_ms  ARGV[4] status  ARGV[5] version
Returns 1 updated, 0 no snapshot (the next warm-up reads the new values).
]]
if #KEYS ~= 1 or #ARGV ~= 5 then
  return redis.error_reply('meta: expects 1 key and 5 args')
end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'limit', ARGV[1], 'starts', ARGV[2], 'ends', ARGV[3], 'status', ARGV[4],
  'version', ARGV[5])
return 1
