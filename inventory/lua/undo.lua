--[[ undo: a request takes back its own reservation, whose confirm message could
not be published.
KEYS[1] stock  KEYS[2] buyers  KEYS[3] inflight  KEYS[4] idem  KEYS[5] idem_age
KEYS[6] due    KEYS[7] holds (stored as claims)  KEYS[8] done
KEYS[9] undone (marker zset, stored as released)
(all seckill:{sku}:...)
ARGV[1] order_id  ARGV[2] lifetime_ms of an undone marker
Returns 1 UNDONE: stock, buyer count and idempotency record given back;
        0 NOTHING: Redis does not hold it (never reserved, undone before, or lost);
        2 HELD: a confirm consumer holds it (hold.lua), so the order goes on;
        3 DONE: it is already confirmed in MySQL.
]]
if #KEYS ~= 9 or #ARGV ~= 2 then
  return redis.error_reply('undo: expects 9 keys and 2 args')
end
local oid = ARGV[1]
if redis.call('HEXISTS', KEYS[7], oid) == 1 then return 2 end
if marker_has(KEYS[8], oid) then return 3 end
local e = redis.call('HGET', KEYS[3], oid)
if not e then return 0 end
local user, qty, _, _, key = inflight_parse(e)
redis.call('HDEL', KEYS[3], oid)
redis.call('ZREM', KEYS[6], oid)
redis.call('HINCRBY', KEYS[1], 'available', qty)
redis.call('HINCRBY', KEYS[1], 'inflight', -qty)
buyer_count_down(KEYS[2], user, qty)
idem_forget(KEYS[4], KEYS[5], user, key, oid)
marker_add(KEYS[9], oid, now_ms(), tonumber(ARGV[2]))
return 1
