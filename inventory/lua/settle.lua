--[[ settle: after the confirm transaction committed, close its reservations.
Idempotent: a reservation no longer in flight changes nothing.
KEYS[1] stock  KEYS[2] buyers  KEYS[3] inflight  KEYS[4] due  KEYS[5] holds (stored as claims)
KEYS[6] done (marker zset)   (all seckill:{sku}:...)
ARGV[1] confirmed_count (c)  ARGV[2] dropped_count (d)  ARGV[3] lifetime_ms of a done marker
ARGV[4..] confirmed: c order ids, then
ARGV[..] dropped: d order ids, then
ARGV[..] returned: the rest.
Confirmed: the reservation just leaves the in-flight hash.
Dropped (refused, its unit dropped): the buyer's count comes back, the unit does
not (Redis was above the truth; putting it back would sell it again and be
refused again).
Returned (refused, its unit returned): MySQL never took the unit, so it comes
back to Redis's available with the buyer's count.
Returns the number of reservations that left the in-flight hash.
]]
if #KEYS ~= 6 or #ARGV < 3 then
  return redis.error_reply('settle: expects 6 keys and at least 3 args')
end
local c, d, lifetime = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
local settled = 0
for i = 4, #ARGV do
  local oid = ARGV[i]
  local e = redis.call('HGET', KEYS[3], oid)
  if e then
    local user, qty = inflight_parse(e)
    redis.call('HDEL', KEYS[3], oid)
    redis.call('HINCRBY', KEYS[1], 'inflight', -qty)
    if i > c + 3 then buyer_count_down(KEYS[2], user, qty) end
    if i > c + d + 3 then redis.call('HINCRBY', KEYS[1], 'available', qty) end
    settled = settled + 1
  end
  redis.call('ZREM', KEYS[4], oid)
  redis.call('HDEL', KEYS[5], oid)
  redis.call('ZADD', KEYS[6], now, oid)
end
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now - lifetime)
return settled
