--[[ authorize: the purchase path's first round trip, in the token's slot.
Reads the token's user, what the request's Idempotency-Key made before (if
anything), and spends one unit of the user's purchase budget (a token bucket).
A token Redis does not hold is answered "unknown" and nothing is written.
KEYS[1] seckill:auth:{<digest>}        hash "u" -> user blob ("-": revoked)
KEYS[2] seckill:auth:{<digest>}:keys   hash idempotency key -> claim
KEYS[3] seckill:auth:{<digest>}:rate   hash "t" tokens left, "ts" last refill (ms)
ARGV[1] idempotency key ("" for none)
ARGV[2] bucket size (0: no throttle)  ARGV[3] ms to earn back one request
Returns {user blob or false, claim or false, wait ms (0: go on)}.
]]
if #KEYS ~= 3 or #ARGV ~= 3 then
  return redis.error_reply('authorize: expects 3 keys and 3 args')
end
local blob = redis.call('HGET', KEYS[1], 'u')
if not blob or blob == '-' then return {blob or false, false, 0} end
local claim = false
if ARGV[1] ~= '' then claim = redis.call('HGET', KEYS[2], ARGV[1]) end
local size, every = tonumber(ARGV[2]), tonumber(ARGV[3])
if size <= 0 then return {blob, claim, 0} end
local now = now_ms()
local st = redis.call('HMGET', KEYS[3], 't', 'ts')
local tokens = tonumber(st[1] or size)
local last = tonumber(st[2] or now)
tokens = math.min(size, tokens + (now - last) / every)
local wait = 0
if tokens < 1 then
  wait = math.ceil((1 - tokens) * every)
else
  tokens = tokens - 1
end
redis.call('HSET', KEYS[3], 't', tostring(tokens), 'ts', now)
redis.call('PEXPIRE', KEYS[3], size * every + 1000)
return {blob, claim, wait}
