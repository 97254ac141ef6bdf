--[[ claim: a confirm consumer takes its own reservation and a batch of others.
A claimed reservation can no longer be undone by the web process (release.lua),
so a confirm that is already under way is never contradicted.
KEYS[1] seckill:{sku}:inflight   KEYS[2] seckill:{sku}:queue
KEYS[3] seckill:{sku}:claims     hash order_id -> claim time (ms)
KEYS[4] seckill:{sku}:done       set of order ids settled after their confirm
KEYS[5] seckill:{sku}:released   set of order ids undone by release.lua
ARGV[1] own order id   ARGV[2] how many other reservations to take at most
Returns {own_state, id1, entry1, id2, entry2, ...} where own_state is
  'claimed'  own reservation is in flight and now claimed (listed first)
  'missing'  Redis does not know it (data lost): confirm from the message body
  'done'     already confirmed and settled: nothing to do
  'released' undone at the request (publish failed): must not be confirmed
]]
if #KEYS ~= 5 or #ARGV ~= 2 then
  return redis.error_reply('claim: expects 5 keys and 2 args')
end
local own, others = ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

if redis.call('SISMEMBER', KEYS[4], own) == 1 then return {'done'} end
if redis.call('SISMEMBER', KEYS[5], own) == 1 then return {'released'} end

local out = {}
local entry = redis.call('HGET', KEYS[1], own)
if entry then
  redis.call('HSET', KEYS[3], own, now)
  out[1] = 'claimed'
  out[2] = own
  out[3] = entry
else
  out[1] = 'missing'
end

local ids = {}
if others > 0 then
  ids = redis.call('LPOP', KEYS[2], others) or {}
end
for _, oid in ipairs(ids) do
  if oid ~= own then
    local e = redis.call('HGET', KEYS[1], oid)
    if e and redis.call('HSETNX', KEYS[3], oid, now) == 1 then
      out[#out + 1] = oid
      out[#out + 1] = e
    end
  end
end
return out
