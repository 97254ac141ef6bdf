--[[ freeze_cancel: resolve a freeze whose process died between its Redis take
and its MySQL move (MySQL has already marked the intent failed).
KEYS[1] stock  KEYS[2] applied (marker zset)
ARGV[1] op_id: the freeze's  ARGV[2] quantity  ARGV[3] lifetime_ms of a marker
Returns 1 the take is given back, 2 the take had not happened and is now
blocked (a late freeze.lua answers "already"), 0 resolved before.
]]
if #KEYS ~= 2 or #ARGV ~= 3 then
  return redis.error_reply('freeze_cancel: expects 2 keys and 3 args')
end
local op, undo, lifetime = ARGV[1], ARGV[1] .. ':undo', tonumber(ARGV[3])
local now = now_ms()
if marker_has(KEYS[2], undo) then return 0 end
if marker_has(KEYS[2], op) then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('HINCRBY', KEYS[1], 'available', tonumber(ARGV[2]))
    redis.call('HINCRBY', KEYS[1], 'frozen', -tonumber(ARGV[2]))
  end
  marker_add(KEYS[2], undo, now, lifetime)
  return 1
end
marker_add(KEYS[2], op, now, lifetime)
marker_add(KEYS[2], undo, now, lifetime)
return 2
