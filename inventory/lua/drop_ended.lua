--[[ drop_ended: retention drops every key of an ended SKU, in one atomic step,
only while nothing could need them: no reservation in flight or held, no
fence, the caller holds the warm lock (no load runs), the snapshot is the one
MySQL's epoch names, and the gate is closed (Redis's own view: status not
active, or its window ended at least the grace ago by Redis's clock).
MySQL then marks the SKU (Sku.redis_dropped_at) under its row lock, so a later
read does not take the missing snapshot for a Redis loss.
KEYS[1] stock  KEYS[2] buyers  KEYS[3] inflight  KEYS[4] idem  KEYS[5] idem_age
KEYS[6] due  KEYS[7] holds (claims)  KEYS[8] done  KEYS[9] undone (released)  KEYS[10] applied
KEYS[11] fence  KEYS[12] lock (warm-lock)   (all seckill:{sku}:...)
ARGV[1] epoch: the one MySQL holds  ARGV[2] lock_token: the caller's warm-lock token
ARGV[3] grace_ms after the window's end
Returns 1 dropped, 0 no snapshot, 2 busy (in flight, held, fenced),
3 still open in Redis, 4 not ours (another epoch, or the lock is not held).
]]
if #KEYS ~= 12 or #ARGV ~= 3 then
  return redis.error_reply('drop_ended: expects 12 keys and 3 args')
end
if redis.call('GET', KEYS[12]) ~= ARGV[2] then return 4 end
local s = redis.call('HMGET', KEYS[1], 'epoch', 'inflight', 'status', 'ends')
if not s[1] then return 0 end
if s[1] ~= ARGV[1] then return 4 end
if tonumber(s[2] or '0') ~= 0 or redis.call('HLEN', KEYS[3]) > 0 or redis.call('HLEN', KEYS[7]) > 0
    or redis.call('EXISTS', KEYS[11]) == 1 then
  return 2
end
local ends = tonumber(s[4] or '0')
if s[3] == 'active' and not (ends > 0 and now_ms() >= ends + tonumber(ARGV[3])) then return 3 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10])
return 1
