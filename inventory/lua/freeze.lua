--[[ freeze: take units out of sale (a "take": Redis first, then MySQL).
KEYS[1] stock  KEYS[2] applied (marker zset of operation ids)
ARGV[1] op_id  ARGV[2] quantity  ARGV[3] lifetime_ms of an applied marker
Returns 1 taken, 0 refused (fewer available in Redis), 2 already applied (or
counted by the snapshot), -1 no snapshot.
]]
if #KEYS ~= 2 or #ARGV ~= 3 then
  return redis.error_reply('freeze: expects 2 keys and 3 args')
end
if marker_has(KEYS[2], ARGV[1]) then return 2 end
local avail = redis.call('HGET', KEYS[1], 'available')
if not avail then return -1 end
local qty = tonumber(ARGV[2])
if tonumber(avail) < qty then return 0 end
redis.call('HINCRBY', KEYS[1], 'available', -qty)
redis.call('HINCRBY', KEYS[1], 'frozen', qty)
marker_add(KEYS[2], ARGV[1], now_ms(), tonumber(ARGV[3]))
return 1
