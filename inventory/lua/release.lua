--[[ release: undo a reservation whose confirm message could not be published.
KEYS[1] seckill:{sku}:stock  KEYS[2] seckill:{sku}:buyers  KEYS[3] seckill:{sku}:inflight
KEYS[4] seckill:{sku}:idem   KEYS[5] seckill:{sku}:claims  KEYS[6] seckill:{sku}:released
ARGV[1] order id
Returns 1 released (stock, buyer count and key given back),
        0 nothing to release (unknown or already released),
        2 refused: a confirm consumer already claimed it, so the order goes on.
]]
if #KEYS ~= 6 or #ARGV ~= 1 then
  return redis.error_reply('release: expects 6 keys and 1 arg')
end
local oid = ARGV[1]
if redis.call('HEXISTS', KEYS[5], oid) == 1 then return 2 end
local e = redis.call('HGET', KEYS[3], oid)
if not e then return 0 end
local p1 = string.find(e, '|', 1, true)
local p2 = string.find(e, '|', p1 + 1, true)
local p3 = string.find(e, '|', p2 + 1, true)
local p4 = string.find(e, '|', p3 + 1, true)
local user = string.sub(e, 1, p1 - 1)
local qty = tonumber(string.sub(e, p1 + 1, p2 - 1))
local key = string.sub(e, p4 + 1)
redis.call('HDEL', KEYS[3], oid)
redis.call('HINCRBY', KEYS[1], 'available', qty)
redis.call('HINCRBY', KEYS[1], 'inflight', -qty)
local left = redis.call('HINCRBY', KEYS[2], user, -qty)
if left <= 0 then redis.call('HDEL', KEYS[2], user) end
redis.call('HDEL', KEYS[4], user .. ':' .. key)
redis.call('SADD', KEYS[6], oid)
return 1
