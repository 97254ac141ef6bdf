--[[ reserve: take stock for one order in one atomic step.
KEYS[1] stock     seckill:{sku}:stock, hash available,total,frozen,inflight,epoch,version,
                  limit,starts,ends,status,price
KEYS[2] buyers    seckill:{sku}:buyers, hash user -> units held (per-user limit)
KEYS[3] inflight  seckill:{sku}:inflight, hash order_id -> in-flight entry (_lib.lua)
KEYS[4] idem      seckill:{sku}:idem, hash "user:key" -> "order_id|quantity"
KEYS[5] idem_age  seckill:{sku}:idem-age, zset "user:key" -> when it was recorded (ms)
KEYS[6] due       seckill:{sku}:due, zset order_id -> when the orphan sweep may republish it (ms)
KEYS[7] missing   seckill:{sku}:missing, marker: MySQL has no such SKU (short TTL)
KEYS[8] undone    seckill:{sku}:released, the order ids their requests took back
KEYS[9] fence     seckill:{sku}:fence, the token of a rebuild waiting behind the broker (fence.lua)
ARGV[1] user_id  ARGV[2] quantity  ARGV[3] idempotency_key  ARGV[4] order_id
ARGV[5] grace_ms before the orphan sweep may republish
ARGV[6] idempotency_ms: the lifetime of an idempotency record
ARGV[7] deciding_ms: how long after its reserve a request may still be deciding
        (publish budget + margin)
Returns {code, ...}; never raises for an expected outcome:
  {0, order_id, available_after, reserved_ms, epoch, unit_price}  OK, stock taken
                                   (unit_price: the snapshot's price, '' if it has none)
  {1, first_order_id, quantity, wait_ms}  DUPLICATE: same user, key and body;
                                   nothing taken. wait_ms > 0: the first is in flight
                                   and its request may still undo it (publish failed)
  {2, first_order_id}              KEY_REUSED: same user and key, other body
  {3, available, epoch}            SOLD_OUT
  {4, held, limit}                 LIMIT_REACHED
  {5}                              NOT_ACTIVE (status or window)
  {6}                              NOT_WARMED: no snapshot in Redis
  {7}                              UNKNOWN_SKU
  {8}                              RETIRED: this order id was undone; use a new one
  {9}                              FENCED: no snapshot, its rebuild waits behind the broker
]]
if #KEYS ~= 9 or #ARGV ~= 7 then
  return redis.error_reply('reserve: expects 9 keys and 7 args')
end
local user, qty, key, oid = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local field = user .. ':' .. key

local s = redis.call('HMGET', KEYS[1], 'available', 'limit', 'starts', 'ends', 'status', 'epoch', 'price')
if not s[1] then
  if redis.call('EXISTS', KEYS[7]) == 1 then return {7} end
  if redis.call('EXISTS', KEYS[9]) == 1 then return {9} end
  return {6}
end

local prior = redis.call('HGET', KEYS[4], field)
if prior then
  local sep = string.find(prior, '|', 1, true)
  local first_id = string.sub(prior, 1, sep - 1)
  local first_qty = tonumber(string.sub(prior, sep + 1))
  if first_qty == qty then
    local wait, e = 0, redis.call('HGET', KEYS[3], first_id)
    if e then
      local _, _, ms = inflight_parse(e)
      wait = math.max(0, ms + tonumber(ARGV[7]) - now_ms())
    end
    return {1, first_id, first_qty, wait}
  end
  return {2, first_id}
end

if marker_has(KEYS[8], oid) then return {8} end
if s[5] ~= 'active' then return {5} end
local now = now_ms()
local starts, ends = tonumber(s[3]), tonumber(s[4])
if (starts > 0 and now < starts) or (ends > 0 and now >= ends) then return {5} end

local avail = tonumber(s[1])
if avail < qty then return {3, avail, tonumber(s[6] or '0')} end
local limit = tonumber(s[2])
local held = tonumber(redis.call('HGET', KEYS[2], user) or '0')
if held + qty > limit then return {4, held, limit} end

local epoch, price = s[6] or '0', s[7] or ''
redis.call('HINCRBY', KEYS[1], 'available', -qty)
redis.call('HINCRBY', KEYS[1], 'inflight', qty)
redis.call('HINCRBY', KEYS[2], user, qty)
redis.call('HSET', KEYS[4], field, oid .. '|' .. qty)
redis.call('ZADD', KEYS[5], now, field)
redis.call('HSET', KEYS[3], oid, inflight_format(user, qty, now, epoch, key, price))
redis.call('ZADD', KEYS[6], now + tonumber(ARGV[5]), oid)

-- Idempotency records past their lifetime go, two per call (amortised);
-- one whose order is still in flight is kept a while longer.
local old = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now - tonumber(ARGV[6]), 'LIMIT', 0, 2)
for _, f in ipairs(old) do
  local v = redis.call('HGET', KEYS[4], f)
  local sep = v and string.find(v, '|', 1, true)
  if sep and redis.call('HEXISTS', KEYS[3], string.sub(v, 1, sep - 1)) == 1 then
    redis.call('ZADD', KEYS[5], now, f)
  else
    redis.call('HDEL', KEYS[4], f)
    redis.call('ZREM', KEYS[5], f)
  end
end
return {0, oid, avail - qty, now, epoch, price}
