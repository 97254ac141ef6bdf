--[[ give: apply a stock move that MySQL already committed (a "give").
Idempotent by operation id: a give delivered twice restores once.
KEYS[1] stock  KEYS[2] buyers  KEYS[3] applied (marker zset of operation ids)
ARGV[1] op_id  ARGV[2] quantity: units back on sale (available, >= 0)
ARGV[3] user_id whose per-user count comes back ("" for none)
ARGV[4] total_delta  ARGV[5] frozen_delta (restock, unfreeze, write-off)
ARGV[6] lifetime_ms of an applied marker
Returns 1 applied, 0 already applied, -1 no snapshot: not applied, the caller
retries (a snapshot being loaded may not count this move yet).
]]
if #KEYS ~= 3 or #ARGV ~= 6 then
  return redis.error_reply('give: expects 3 keys and 6 args')
end
if marker_has(KEYS[3], ARGV[1]) then return 0 end
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local qty = tonumber(ARGV[2])
if qty ~= 0 then redis.call('HINCRBY', KEYS[1], 'available', qty) end
if ARGV[3] ~= '' and qty > 0 then buyer_count_down(KEYS[2], ARGV[3], qty) end
local total, frozen = tonumber(ARGV[4]), tonumber(ARGV[5])
if total ~= 0 then redis.call('HINCRBY', KEYS[1], 'total', total) end
if frozen ~= 0 then redis.call('HINCRBY', KEYS[1], 'frozen', frozen) end
marker_add(KEYS[3], ARGV[1], now_ms(), tonumber(ARGV[6]))
return 1
