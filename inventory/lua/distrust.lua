--[[ distrust: a new Redis instance came up holding data of this SKU (restored
from a file, or a replica that was promoted): the data may be older than what
was lost, so it is dropped and the SKU fenced like a lost one (fence.lua).
The markers of confirmed and undone reservations stay (they only ever help).
KEYS[1] stock  KEYS[2] buyers  KEYS[3] inflight  KEYS[4] idem  KEYS[5] idem_age
KEYS[6] due  KEYS[7] holds (stored as claims)  KEYS[8] applied  KEYS[9] fence
ARGV[1] fence_id: a new unique id  ARGV[2] delay_ms before the fence may be sent
Returns {0} nothing of this SKU here, {1, token} dropped and fenced (a fence
found here is replaced: its not-before counted from the old instance).
]]
if #KEYS ~= 9 or #ARGV ~= 2 then
  return redis.error_reply('distrust: expects 9 keys and 2 args')
end
if redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[9]) == 0 then return {0} end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
local token = fence_token_new(ARGV[1], ARGV[2])
redis.call('SET', KEYS[9], token)
return {1, token}
