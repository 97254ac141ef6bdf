--[[ lock_release: drop a lock only if this holder still has it (a plain DEL
could drop a lock another process took after ours expired).
KEYS[1] the lock  ARGV[1] the holder's token
Returns 1 released, 0 not ours (expired and taken, or gone).
]]
if #KEYS ~= 1 or #ARGV ~= 1 then
  return redis.error_reply('lock_release: expects 1 key and 1 arg')
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
