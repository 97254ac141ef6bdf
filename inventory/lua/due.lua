--[[ due: the reservations the orphan sweep should publish again, at most a cap.
A reservation is due when its deadline (set by reserve.lua) has passed and no
consumer held it within the grace period. Each one returned gets its next
deadline at once, further away the older it is (capped), so a reservation that
is merely slow (worker down, long backlog) is not republished on every sweep.
KEYS[1] inflight  KEYS[2] due (zset order_id -> deadline ms)  KEYS[3] holds (stored as claims)
ARGV[1] cap  ARGV[2] grace_ms  ARGV[3] longest_ms: the longest wait between two republishes
ARGV[4] ahead_ms: look this far ahead of now (0 in production, tests use it)
Returns {order_id, entry, order_id, entry, ...}.
]]
if #KEYS ~= 3 or #ARGV ~= 4 then
  return redis.error_reply('due: expects 3 keys and 4 args')
end
local cap, grace, longest = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms() + tonumber(ARGV[4])
local out = {}
for _, oid in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, cap)) do
  local e = redis.call('HGET', KEYS[1], oid)
  if not e then
    redis.call('ZREM', KEYS[2], oid)
  else
    local held = tonumber(redis.call('HGET', KEYS[3], oid) or '0')
    if held > 0 and now - held < grace then
      redis.call('ZADD', KEYS[2], held + grace, oid)
    else
      local _, _, reserved = inflight_parse(e)
      local wait = math.min(math.max(grace, now - reserved), longest)
      redis.call('ZADD', KEYS[2], now + wait, oid)
      out[#out + 1] = oid
      out[#out + 1] = e
    end
  end
end
return out
