--[[ token_fill: write what a request read from MySQL into the token's record,
unless something newer got there first. A fill (after a miss) or a refresh (of a
record close to its expiry) read MySQL after the Redis time `since_ms`; it
is discarded when
- the record says "-" (a deletion under way, or the tombstone of one that
  committed: a fill must not bring a deleted token back),
- an authoritative write (token_write) came at or after `since_ms`: its data
  is newer than the read, or
- more than `budget_ms` passed since `since_ms`: the tombstone of a deletion
  committed during the read lasts longer than that, so a slower fill cannot
  tell whether it missed one.
KEYS[1] record  seckill:auth:{<digest>}, hash "u" -> user blob, "w" -> ms of the last
                authoritative write
ARGV[1] user_blob ("-": refused)  ARGV[2] since_ms: Redis time before MySQL was read
ARGV[3] lifetime_ms of the record  ARGV[4] budget_ms: the fill's
Returns 1 written, 0 discarded.
]]
if #KEYS ~= 1 or #ARGV ~= 4 then
  return redis.error_reply('token_fill: expects 1 key and 4 args')
end
local since = tonumber(ARGV[2])
if now_ms() - since > tonumber(ARGV[4]) then return 0 end
local cur = redis.call('HMGET', KEYS[1], 'u', 'w')
if cur[1] == '-' then return 0 end
if cur[2] and tonumber(cur[2]) >= since then return 0 end
redis.call('HSET', KEYS[1], 'u', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
