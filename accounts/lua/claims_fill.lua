--[[ claims_fill: the claims a token's keys made, read from MySQL after its
record had to be filled (so its claims may have been lost with a shard).
A claim Redis holds already is kept (it is as new or newer).
KEYS[1] claims  <prefix>:auth:{<digest>}:keys, hash key -> "claimed_ms|qty|order_id|sku_id"
ARGV[1] lifetime_ms of a claim  ARGV[2..] key_claims: key, claim, key, claim, ...
Returns how many claims were added.
]]
if #KEYS ~= 1 or #ARGV < 1 or #ARGV % 2 ~= 1 then
  return redis.error_reply('claims_fill: expects 1 key and a lifetime, then pairs')
end
local added = 0
for i = 2, #ARGV, 2 do
  added = added + redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1])
end
if added > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return added
