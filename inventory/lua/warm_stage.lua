--[[ warm_stage: one bounded chunk of a snapshot, written to staging keys that
warm.lua later moves into place in one step (so no request ever sees half a
snapshot, and no single call carries an unbounded argument list).
KEYS[1] stage_buyers  KEYS[2] stage_idem  KEYS[3] stage_idem_age  KEYS[4] stage_applied
(seckill:{sku}:stage:<load token>:..., expiring on their own if the load dies)
ARGV[1] kind: 'b' buyers (pairs user, units), 'i' idempotency records (triples
"user:key", "order_id|qty", recorded ms), 'a' operation ids already counted
ARGV[2] ttl_s: the lifetime of the staging keys
ARGV[3..] items
Returns the number of items staged.
]]
if #KEYS ~= 4 or #ARGV < 2 then
  return redis.error_reply('warm_stage: expects 4 keys and at least 2 args')
end
local kind, ttl, n = ARGV[1], tonumber(ARGV[2]), 0
if kind == 'b' then
  for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]); n = n + 1 end
  redis.call('EXPIRE', KEYS[1], ttl)
elseif kind == 'i' then
  for i = 3, #ARGV, 3 do
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
    redis.call('ZADD', KEYS[3], ARGV[i + 2], ARGV[i])
    n = n + 1
  end
  redis.call('EXPIRE', KEYS[2], ttl)
  redis.call('EXPIRE', KEYS[3], ttl)
elseif kind == 'a' then
  local now = now_ms()
  for i = 3, #ARGV do redis.call('ZADD', KEYS[4], now, ARGV[i]); n = n + 1 end
  redis.call('EXPIRE', KEYS[4], ttl)
else
  return redis.error_reply('warm_stage: unknown kind ' .. kind)
end
return n
