--[[ key_claim: claim an Idempotency-Key for an order, across all SKUs of the user.
Runs in the token's slot, pipelined with reserve.lua (the SKU's slot): of two
requests with the same key at the same moment, exactly one claim wins; the
loser undoes its reservation and is answered from the winner's claim.
KEYS[1] claims  seckill:auth:{<token digest>}:keys, hash key -> "claimed_ms|qty|order_id|sku_id"
ARGV[1] idempotency_key  ARGV[2] quantity  ARGV[3] order_id  ARGV[4] sku_id
ARGV[5] lifetime_ms of a claim
Returns {1} claimed, or {0, existing claim} when a live claim holds the key.
]]
if #KEYS ~= 1 or #ARGV ~= 5 then
  return redis.error_reply('key_claim: expects 1 key and 5 args')
end
local now = now_ms()
local lifetime = tonumber(ARGV[5])
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then
  local claimed = tonumber(string.sub(v, 1, string.find(v, '|', 1, true) - 1))
  if now - claimed < lifetime then return {0, v} end
end
redis.call('HSET', KEYS[1], ARGV[1], now .. '|' .. ARGV[2] .. '|' .. ARGV[3] .. '|' .. ARGV[4])
redis.call('PEXPIRE', KEYS[1], lifetime)
-- A busy user keeps the hash alive: past a size, claims past their lifetime go.
if redis.call('HLEN', KEYS[1]) > 256 then
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local c = all[i + 1]
    if now - tonumber(string.sub(c, 1, string.find(c, '|', 1, true) - 1)) >= lifetime then
      redis.call('HDEL', KEYS[1], all[i])
    end
  end
end
return {1}
