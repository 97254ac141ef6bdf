--[[ hold: a confirm consumer holds the reservations of the messages it has.
A held reservation can no longer be undone by its request (undo.lua), so a
confirm that is under way is never contradicted.
KEYS[1] inflight  KEYS[2] holds (hash order_id -> hold time, ms; stored as seckill:{sku}:claims)
KEYS[3] done (marker zset)  KEYS[4] undone (marker zset, stored as seckill:{sku}:released)
(all seckill:{sku}:...)
ARGV[1..] order_ids (at most a few hundred per call; the caller chunks)
Returns {state_1, ..., state_n, id, entry, id, entry, ...}: one state per id,
  'held'     in flight and now held (its entry follows among the pairs)
  'missing'  Redis does not know it (data lost): confirm from the message body
  'done'     already confirmed and settled: nothing to do
  'undone'   undone by its request (publish failed): must not be confirmed
]]
if #KEYS ~= 4 or #ARGV < 1 then
  return redis.error_reply('hold: expects 4 keys and at least 1 arg')
end
local now = now_ms()
local out, pairs_out = {}, {}
for i = 1, #ARGV do
  local oid = ARGV[i]
  local state
  if marker_has(KEYS[3], oid) then
    state = 'done'
  elseif marker_has(KEYS[4], oid) then
    state = 'undone'
  else
    local e = redis.call('HGET', KEYS[1], oid)
    if e then
      redis.call('HSET', KEYS[2], oid, now)
      state = 'held'
      pairs_out[#pairs_out + 1] = oid
      pairs_out[#pairs_out + 1] = e
    else
      state = 'missing'
    end
  end
  out[i] = state
end
for _, v in ipairs(pairs_out) do out[#out + 1] = v end
return out
