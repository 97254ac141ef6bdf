--[[ warm: put a staged snapshot in place, only where Redis has none.
Never overwrites a live snapshot: that would lose decrements in flight.
KEYS[1] stock  KEYS[2] buyers  KEYS[3] idem  KEYS[4] idem_age  KEYS[5] applied
KEYS[6] missing  KEYS[7] inflight
the staging keys of warm_stage.lua:
KEYS[8] stage_buyers  KEYS[9] stage_idem  KEYS[10] stage_idem_age  KEYS[11] stage_applied
KEYS[12] fence (fence.lua)
ARGV[1] available  ARGV[2] total  ARGV[3] frozen  ARGV[4] epoch  ARGV[5] version
ARGV[6] per_user_limit  ARGV[7] starts_ms  ARGV[8] ends_ms  ARGV[9] status
ARGV[10] unit_price (decimal text)
ARGV[11] fence_token: the fence this load passes ('' for a load that needs no fence)
Returns 1 loaded, 0 a snapshot was already there (nothing changed), 2 the
fence is not this one any more (Redis was lost again, or another load ran):
nothing changed.
]]
if #KEYS ~= 12 or #ARGV ~= 11 then
  return redis.error_reply('warm: expects 12 keys and 11 args')
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[8], KEYS[9], KEYS[10], KEYS[11])
  return 0
end
if ARGV[11] ~= '' and redis.call('GET', KEYS[12]) ~= ARGV[11] then
  redis.call('DEL', KEYS[8], KEYS[9], KEYS[10], KEYS[11])
  return 2
end
for i = 2, 5 do
  if redis.call('EXISTS', KEYS[i + 6]) == 1 then
    redis.call('RENAME', KEYS[i + 6], KEYS[i])
    redis.call('PERSIST', KEYS[i])
  else
    redis.call('DEL', KEYS[i])
  end
end
-- Reservations still in flight keep their count (their confirms are coming).
local inflight = 0
for _, e in ipairs(redis.call('HVALS', KEYS[7])) do
  local _, qty = inflight_parse(e)
  inflight = inflight + qty
end
redis.call('HSET', KEYS[1],
  'available', ARGV[1], 'total', ARGV[2], 'frozen', ARGV[3], 'inflight', inflight,
  'epoch', ARGV[4], 'version', ARGV[5], 'limit', ARGV[6], 'starts', ARGV[7], 'ends', ARGV[8],
  'status', ARGV[9], 'price', ARGV[10])
redis.call('DEL', KEYS[6], KEYS[12])
return 1
