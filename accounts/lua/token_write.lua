--[[ token_write: an authoritative write of the token's record (a token or its
user changed in MySQL, accounts.signals), stamped with the Redis time so that a
fill whose MySQL read started before it is discarded (token_fill.lua).
KEYS[1] record  seckill:auth:{<digest>}, hash "u" -> user blob, "w" -> ms of this write
KEYS[2] claims  seckill:auth:{<digest>}:keys   KEYS[3] rate  seckill:auth:{<digest>}:rate
KEYS[4] calls   seckill:auth:{<digest>}:calls
ARGV[1] user_blob, or "-": refuse the token
ARGV[2] lifetime_ms of the record
ARGV[3] mode: "store", a user blob, not over a "-" (a deletion under way wins);
        "refuse": "-", over anything;
        "forget": "-", over anything, and the token's claims and budgets go
Returns 1 written, 0 not (a store meeting "-").
]]
if #KEYS ~= 4 or #ARGV ~= 3 then
  return redis.error_reply('token_write: expects 4 keys and 3 args')
end
local mode = ARGV[3]
if mode == 'store' and redis.call('HGET', KEYS[1], 'u') == '-' then return 0 end
redis.call('HSET', KEYS[1], 'u', ARGV[1], 'w', now_ms())
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if mode == 'forget' then redis.call('DEL', KEYS[2], KEYS[3], KEYS[4]) end
return 1
