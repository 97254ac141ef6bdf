--[[ rebuild: drop a SKU's snapshot so the next warm-up reloads it from MySQL,
only while nothing is in flight (a reservation not yet in MySQL would be lost).
KEYS[1] stock  KEYS[2] inflight  KEYS[3] buyers  KEYS[4] idem  KEYS[5] idem_age
KEYS[6] applied
Returns 1 dropped, 0 refused (reservations in flight).
]]
if #KEYS ~= 6 or #ARGV ~= 0 then
  return redis.error_reply('rebuild: expects 6 keys and no args')
end
if redis.call('HLEN', KEYS[2]) > 0 then return 0 end
local inflight = tonumber(redis.call('HGET', KEYS[1], 'inflight') or '0')
if inflight > 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
return 1
