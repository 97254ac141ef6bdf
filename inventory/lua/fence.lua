--[[ fence: Redis has no snapshot of a SKU it held before (it was flushed,
restarted empty, or failed over): the rebuild must wait until every
reservation the lost Redis accepted is in MySQL. This marks the SKU fenced
(the gate answers FENCED, nothing is taken) and says when the fence may be
sent through the confirm queue: once every request that reserved before the
loss has had its publish confirmed or given up (the publish budget), a
message published after that moment is behind all of their messages.
KEYS[1] stock  KEYS[2] fence
ARGV[1] fence_id: a new unique id  ARGV[2] delay_ms before the fence may be sent
The fence's token is "<id>|<not_before_ms>": whoever finds the SKU fenced can
tell when its fence may be sent.
Returns {0} a snapshot is there (nothing to fence), {1, token} fenced now,
{2, token} fenced already.
]]
if #KEYS ~= 2 or #ARGV ~= 2 then
  return redis.error_reply('fence: expects 2 keys and 2 args')
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {0} end
local token = redis.call('GET', KEYS[2])
if token then return {2, token} end
token = fence_token_new(ARGV[1], ARGV[2])
redis.call('SET', KEYS[2], token)
return {1, token}
