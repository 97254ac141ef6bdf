--[[ lock_release: drop a lock only if this holder still has it (a plain DEL
could drop a lock another process took after ours expired).
KEYS[1] lock  ARGV[1] token: the holder's
Returns 1 RELEASED
        0 NOT_OURS: expired and taken, or gone
(no caller branches on them: a lock not ours is no longer ours to drop).
]]
if #KEYS ~= 1 or #ARGV ~= 1 then
  return redis.error_reply('lock_release: expects 1 key and 1 arg')
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
