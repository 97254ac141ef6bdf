--[[ registry_add: a SKU id joins the registry of SKU ids MySQL has, and is
remembered as recent, so a rebuild that read MySQL before its row committed
keeps it (registry_swap.lua).
KEYS[1] registry (set)  KEYS[2] recent ids (zset id -> when added, ms)
ARGV[1] sku_id  ARGV[2] recent_ms: how long an id counts as recent
Returns 1.
]]
if #KEYS ~= 2 or #ARGV ~= 2 then
  return redis.error_reply('registry_add: expects 2 keys and 2 args')
end
local now = now_ms()
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[2]))
return 1
