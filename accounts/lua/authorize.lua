--[[ authorize: an API call's first round trip, in the token's slot.
Reads the token's user, what the request's Idempotency-Key made before (if
anything), and spends one unit of one of the user's budgets (a token bucket:
purchases, or order calls).
A token Redis does not hold is answered "unknown" and nothing is written.
A record close to its expiry is handed to one request (the fill lock) to be
read again from MySQL, so a busy token never falls out of the cache.
KEYS[1] record  seckill:auth:{<digest>}, hash "u" -> user blob ("-": refused),
                "w" -> ms of the last authoritative write
KEYS[2] claims  seckill:auth:{<digest>}:keys, hash idempotency key -> claim
KEYS[3] budget  the one spent from: seckill:auth:{<digest>}:rate (purchases) or
                seckill:auth:{<digest>}:calls (order calls);
                hash "t" tokens left, "ts" last refill (ms)
KEYS[4] fill    seckill:auth:{<digest>}:fill, the fill lock: one refresh at a time
ARGV[1] idempotency_key ("" for none)
ARGV[2] bucket: its size (0: no throttle)  ARGV[3] every_ms: to earn back one request
ARGV[4] refresh_ms: refresh when the record has less than this many ms left
ARGV[5] fill_lock_ms: the fill lock's lifetime
Returns {user blob or false, claim or false, wait ms (0: go on),
         Redis time (ms; a fill's read of MySQL starts after it), 1: refresh the record}.
]]
if #KEYS ~= 4 or #ARGV ~= 5 then
  return redis.error_reply('authorize: expects 4 keys and 5 args')
end
local now = now_ms()
local blob = redis.call('HGET', KEYS[1], 'u')
if not blob or blob == '-' then return {blob or false, false, 0, now, 0} end
local refresh = 0
local left = redis.call('PTTL', KEYS[1])
if left >= 0 and left < tonumber(ARGV[4])
    and redis.call('SET', KEYS[4], '1', 'NX', 'PX', ARGV[5]) then
  refresh = 1
end
local claim = false
if ARGV[1] ~= '' then claim = redis.call('HGET', KEYS[2], ARGV[1]) end
local size, every = tonumber(ARGV[2]), tonumber(ARGV[3])
if size <= 0 then return {blob, claim, 0, now, refresh} end
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
return {blob, claim, wait, now, refresh}
