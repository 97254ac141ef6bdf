--[[ reserve: take stock for one order in one atomic step.
KEYS[1] seckill:{sku}:stock     hash available,total,frozen,inflight,version,limit,starts,ends,status
KEYS[2] seckill:{sku}:buyers    hash user_id -> units held (per-user limit)
KEYS[3] seckill:{sku}:inflight  hash order_id -> "user|qty|reserved_ms|version|idempotency_key"
KEYS[4] seckill:{sku}:idem      hash "user:key" -> "order_id|qty"
KEYS[5] seckill:{sku}:queue     list of order ids waiting for a confirm batch
KEYS[6] seckill:{sku}:missing   marker: MySQL has no such SKU (short TTL)
ARGV[1] user id   ARGV[2] quantity   ARGV[3] idempotency key   ARGV[4] new order id
Returns {code, ...}; never raises for an expected outcome:
  {0, order_id, available_after}   OK, stock taken
  {1, first_order_id, quantity}    DUPLICATE: same user, key and body; nothing taken
  {2, first_order_id}              KEY_REUSED: same user and key, other body
  {3, available}                   SOLD_OUT
  {4, held, limit}                 LIMIT_REACHED
  {5}                              SALE_NOT_ACTIVE (status or window)
  {6}                              NOT_WARMED: no snapshot in Redis
  {7}                              UNKNOWN_SKU
]]
if #KEYS ~= 6 or #ARGV ~= 4 then
  return redis.error_reply('reserve: expects 6 keys and 4 args')
end
local user, qty, key, oid = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local idem_field = user .. ':' .. key

local s = redis.call('HMGET', KEYS[1], 'available', 'limit', 'starts', 'ends', 'status', 'version')
if not s[1] then
  if redis.call('EXISTS', KEYS[6]) == 1 then return {7} end
  return {6}
end

local prior = redis.call('HGET', KEYS[4], idem_field)
if prior then
  local sep = string.find(prior, '|', 1, true)
  local first_id = string.sub(prior, 1, sep - 1)
  local first_qty = tonumber(string.sub(prior, sep + 1))
  if first_qty == qty then return {1, first_id, first_qty} end
  return {2, first_id}
end

if s[5] ~= 'active' then return {5} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local starts, ends = tonumber(s[3]), tonumber(s[4])
if (starts > 0 and now < starts) or (ends > 0 and now >= ends) then return {5} end

local avail = tonumber(s[1])
if avail < qty then return {3, avail} end
local limit = tonumber(s[2])
local held = tonumber(redis.call('HGET', KEYS[2], user) or '0')
if held + qty > limit then return {4, held, limit} end

redis.call('HINCRBY', KEYS[1], 'available', -qty)
redis.call('HINCRBY', KEYS[1], 'inflight', qty)
redis.call('HINCRBY', KEYS[2], user, qty)
redis.call('HSET', KEYS[4], idem_field, oid .. '|' .. qty)
redis.call('HSET', KEYS[3], oid, user .. '|' .. qty .. '|' .. now .. '|' .. s[6] .. '|' .. key)
redis.call('RPUSH', KEYS[5], oid)
return {0, oid, avail - qty}
