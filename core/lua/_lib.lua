--[[ core _lib: Lua definitions every script of the project shares; the loader
(core.redis.scripts.Scripts) prepends this file, then the app's own _lib.lua. Nothing
here touches a key.

Markers are sorted sets scored by the time they were written; each writer
trims entries older than the marker's lifetime, so a marker set holds at most
(writes per lifetime) entries.
]]
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
