--[[ adjust: a reconciliation repair of the available figure, by a delta.
Idempotent by repair id. Lowering never goes below zero.
KEYS[1] stock  KEYS[2] applied (marker zset)
ARGV[1] repair_id  ARGV[2] delta (negative lowers)  ARGV[3] lifetime_ms of the marker
ARGV[4] whole: "whole", a lowering that does not fit is refused, not clamped
        (a dead-letter replay taking a reservation's units again, like the gate); or ""
Returns the new available, false when already applied or no snapshot, or -1
when a "whole" lowering was refused (nothing changed, no marker).
]]
if #KEYS ~= 2 or #ARGV ~= 4 then
  return redis.error_reply('adjust: expects 2 keys and 4 args')
end
if marker_has(KEYS[2], ARGV[1]) then return false end
local avail = redis.call('HGET', KEYS[1], 'available')
if not avail then return false end
local delta = tonumber(ARGV[2])
if tonumber(avail) + delta < 0 then
  if ARGV[4] == 'whole' then return -1 end
  delta = 0 - tonumber(avail)  -- not -avail: Lua writes -0 as "-0", which HINCRBY refuses
end
marker_add(KEYS[2], ARGV[1], now_ms(), tonumber(ARGV[3]))
return redis.call('HINCRBY', KEYS[1], 'available', delta)
