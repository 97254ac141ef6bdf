--[[ inventory _lib: the formats the gate's scripts share (prepended after
core/lua/_lib.lua by the loader). Nothing here touches a key by itself.

In-flight entry (value of seckill:{sku}:inflight[order_id]):
  "v2|<user>|<quantity>|<reserved_ms>|<epoch>|<unit price>|<idempotency key>"
The key comes last, so it may itself contain '|'. The unit price is the
snapshot's at the reservation (decimal text, '' when the snapshot had none).
An entry without the "v2|" head was written before prices were kept:
  "<user>|<quantity>|<reserved_ms>|<epoch>|<idempotency key>"
(it starts with the user id's digits, so the two cannot be confused); it
parses with the price ''.
]]
local INFLIGHT_V2 = 'v2|'

local function inflight_format(user, qty, ms, epoch, key, price)
  return INFLIGHT_V2 .. user .. '|' .. qty .. '|' .. ms .. '|' .. epoch .. '|' .. (price or '') .. '|' .. key
end

-- user, quantity, reserved_ms, epoch, idempotency key, unit price
local function inflight_parse(e)
  local start, price = 1, ''
  if string.sub(e, 1, 3) == INFLIGHT_V2 then start = 4 end
  local p1 = string.find(e, '|', start, true)
  local p2 = string.find(e, '|', p1 + 1, true)
  local p3 = string.find(e, '|', p2 + 1, true)
  local p4 = string.find(e, '|', p3 + 1, true)
  local rest = p4 + 1
  if start == 4 then
    local p5 = string.find(e, '|', p4 + 1, true)
    price, rest = string.sub(e, p4 + 1, p5 - 1), p5 + 1
  end
  return string.sub(e, start, p1 - 1), tonumber(string.sub(e, p1 + 1, p2 - 1)),
    tonumber(string.sub(e, p2 + 1, p3 - 1)), tonumber(string.sub(e, p3 + 1, p4 - 1)), string.sub(e, rest), price
end

-- The buyer's per-user count goes down; the field goes at zero.
local function buyer_count_down(buyers, user, qty)
  local left = redis.call('HINCRBY', buyers, user, -qty)
  if left <= 0 then redis.call('HDEL', buyers, user) end
end

-- The idempotency record of (user, key) goes, if it still names this order.
local function idem_forget(idem, idem_age, user, key, oid)
  local field = user .. ':' .. key
  local v = redis.call('HGET', idem, field)
  if v and string.sub(v, 1, #oid + 1) == oid .. '|' then
    redis.call('HDEL', idem, field)
    redis.call('ZREM', idem_age, field)
  end
end

-- A fence's token: "<unique id>|<ms from now on which it may be sent>" (fence.lua).
local function fence_token_new(id, delay_ms)
  return id .. '|' .. (now_ms() + tonumber(delay_ms))
end
