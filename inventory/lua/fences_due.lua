--[[ fences_due: the fenced SKUs whose fence may be sent now. Each one
returned is due again `again_ms` later (a fence message lost with a broker
that restarted is sent again; copies are harmless, a fence passes once).
KEYS[1] fences: seckill:fences (zset sku -> when its fence may be sent next, ms)
ARGV[1] cap: at most this many  ARGV[2] again_ms
Returns the SKU ids.
]]
if #KEYS ~= 1 or #ARGV ~= 2 then
  return redis.error_reply('fences_due: expects 1 key and 2 args')
end
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, sku in ipairs(due) do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), sku)
end
return due
