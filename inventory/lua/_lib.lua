--[[ _lib: definitions shared by every script of this folder.
redis_store prepends this file to each script when it loads it, so the formats
below are written once. Nothing here touches a key.

In-flight entry (value of seckill:{sku}:inflight[order_id]):
  "<user>|<quantity>|<reserved_ms>|<epoch>|<idempotency key>"
The key comes last, so it may itself contain '|'.

Markers (done, released, applied) are sorted sets scored by the time they were
written; each writer trims entries older than the marker's lifetime, so a
marker set holds at most (writes per lifetime) entries.
]]
local function inflight_format(user, qty, ms, epoch, key)
  return user .. '|' .. qty .. '|' .. ms .. '|' .. epoch .. '|' .. key
end

local function inflight_parse(e)
  local p1 = string.find(e, '|', 1, true)
  local p2 = string.find(e, '|', p1 + 1, true)
  local p3 = string.find(e, '|', p2 + 1, true)
  local p4 = string.find(e, '|', p3 + 1, true)
  return string.sub(e, 1, p1 - 1), tonumber(string.sub(e, p1 + 1, p2 - 1)),
    tonumber(string.sub(e, p2 + 1, p3 - 1)), tonumber(string.sub(e, p3 + 1, p4 - 1)), string.sub(e, p4 + 1)
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Record a marker and drop the ones older than its lifetime.
local function marker_add(key, member, now, lifetime_ms)
  redis.call('ZADD', key, now, member)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - lifetime_ms)
end

local function marker_has(key, member)
  return redis.call('ZSCORE', key, member) ~= false
end

-- The buyer's per-user count goes down; the field goes at zero.
local function buyer_release(buyers, user, qty)
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
