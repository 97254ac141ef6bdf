--[[ settle: after the confirm transaction committed, close its reservations.
Idempotent: a reservation no longer in flight changes nothing.
KEYS[1] seckill:{sku}:stock  KEYS[2] seckill:{sku}:buyers  KEYS[3] seckill:{sku}:inflight
KEYS[4] seckill:{sku}:claims KEYS[5] seckill:{sku}:done
ARGV[1] c = number of confirmed ids, ARGV[2] f = number of stock-refused ids,
then c confirmed ids, f stock-refused ids, and the rest: ids refused for another
reason. Confirmed: the reservation just leaves the in-flight hash.
Stock-refused: the buyer's count comes back, the unit does not (Redis was above
the truth; giving it back would sell it again and fail again).
Other refusals: MySQL kept the unit, so it comes back to Redis with the count.
Returns the number of reservations that left the in-flight hash.
]]
if #KEYS ~= 5 or #ARGV < 2 then
  return redis.error_reply('settle: expects 5 keys and at least 2 args')
end
local c, f = tonumber(ARGV[1]), tonumber(ARGV[2])
local settled = 0
for i = 3, #ARGV do
  local oid = ARGV[i]
  local e = redis.call('HGET', KEYS[3], oid)
  if e then
    local p1 = string.find(e, '|', 1, true)
    local p2 = string.find(e, '|', p1 + 1, true)
    local user = string.sub(e, 1, p1 - 1)
    local qty = tonumber(string.sub(e, p1 + 1, p2 - 1))
    redis.call('HDEL', KEYS[3], oid)
    redis.call('HINCRBY', KEYS[1], 'inflight', -qty)
    if i > c + 2 then
      local left = redis.call('HINCRBY', KEYS[2], user, -qty)
      if left <= 0 then redis.call('HDEL', KEYS[2], user) end
    end
    if i > c + f + 2 then
      redis.call('HINCRBY', KEYS[1], 'available', qty)
    end
    settled = settled + 1
  end
  redis.call('HDEL', KEYS[4], oid)
  redis.call('SADD', KEYS[5], oid)
end
return settled
