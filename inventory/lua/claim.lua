--[[ claim: a confirm consumer takes the reservations of its message, plus a
batch of other reservations of the same SKU waiting in the queue.
A claimed reservation can no longer be undone by the web process (release.lua),
so a confirm that is under way is never contradicted.
KEYS[1] seckill:{sku}:inflight   KEYS[2] seckill:{sku}:queue
KEYS[3] seckill:{sku}:claims     hash order_id -> claim time (ms)
KEYS[4] seckill:{sku}:done       set of order ids settled after their confirm
KEYS[5] seckill:{sku}:released   set of order ids undone by release.lua
ARGV[1] how many other reservations to take at most; ARGV[2..] the message's own order ids
Returns {n, state_1, ..., state_n, id, entry, id, entry, ...}: one state per own id,
  'claimed'  in flight and now claimed (its entry is among the pairs)
  'missing'  Redis does not know it (data lost): confirm from the message body
  'done'     already confirmed and settled: nothing to do
  'released' undone at the request (publish failed): must not be confirmed
then the claimed reservations (own and others) as id/entry pairs.
]]
if #KEYS ~= 5 or #ARGV < 2 then
  return redis.error_reply('claim: expects 5 keys and at least 2 args')
end
local others = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local n = #ARGV - 1
local out = {n}
local pairs_out = {}
local own = {}
for i = 2, #ARGV do
  local oid = ARGV[i]
  own[oid] = true
  local state
  if redis.call('SISMEMBER', KEYS[4], oid) == 1 then
    state = 'done'
  elseif redis.call('SISMEMBER', KEYS[5], oid) == 1 then
    state = 'released'
  else
    local e = redis.call('HGET', KEYS[1], oid)
    if e then
      redis.call('HSET', KEYS[3], oid, now)
      state = 'claimed'
      pairs_out[#pairs_out + 1] = oid
      pairs_out[#pairs_out + 1] = e
    else
      state = 'missing'
    end
  end
  out[#out + 1] = state
end

if others > 0 then
  local ids = redis.call('LPOP', KEYS[2], others) or {}
  for _, oid in ipairs(ids) do
    if not own[oid] then
      local e = redis.call('HGET', KEYS[1], oid)
      if e and redis.call('HSETNX', KEYS[3], oid, now) == 1 then
        pairs_out[#pairs_out + 1] = oid
        pairs_out[#pairs_out + 1] = e
      end
    end
  end
end
for _, v in ipairs(pairs_out) do out[#out + 1] = v end
return out
