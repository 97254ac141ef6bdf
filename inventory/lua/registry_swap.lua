--[[ registry_swap: the registry becomes exactly the ids staged from MySQL plus
the ids added recently (a create whose row was not committed when MySQL was
read), so ids of SKUs that never committed, or are gone, leave it.
KEYS[1] registry (set)  KEYS[2] staged ids (set, filled in chunks)
KEYS[3] recent ids (zset)   KEYS[4] complete: the flag
ARGV[1] recent_ms: how long an id counts as recent  ARGV[2] complete_s: lifetime of the flag
Returns the registry's size.
]]
if #KEYS ~= 4 or #ARGV ~= 2 then
  return redis.error_reply('registry_swap: expects 4 keys and 2 args')
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms() - tonumber(ARGV[1]))
local recent = redis.call('ZRANGE', KEYS[3], 0, -1)
for i = 1, #recent, 500 do
  redis.call('SADD', KEYS[2], unpack(recent, i, math.min(i + 499, #recent)))
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('RENAME', KEYS[2], KEYS[1])
  redis.call('PERSIST', KEYS[1])
else
  redis.call('DEL', KEYS[1])
end
redis.call('SET', KEYS[4], 1, 'EX', tonumber(ARGV[2]))
return redis.call('SCARD', KEYS[1])
