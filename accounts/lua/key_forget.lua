--[[ key_forget: drop an Idempotency-Key claim if it still names this order.
KEYS[1] claims  seckill:auth:{<token digest>}:keys
ARGV[1] idempotency_key  ARGV[2] order_id
Returns 1 DROPPED
        0 NOT_OURS: the key names another order (or nothing)
(no caller branches on them: either way the key no longer names this order).
]]
if #KEYS ~= 1 or #ARGV ~= 2 then
  return redis.error_reply('key_forget: expects 1 key and 2 args')
end
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local p1 = string.find(v, '|', 1, true)
local p2 = string.find(v, '|', p1 + 1, true)
local p3 = string.find(v, '|', p2 + 1, true)
if string.sub(v, p2 + 1, p3 - 1) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
