--[[ token_fill: write what a request read from MySQL into the token's record,
unless something newer got there first. A fill (after a miss) or a refresh (of a
record close to its expiry) read MySQL after the Redis time ARGV[2]; it is
discarded when
- the record says "-" (a deletion under way, or the tombstone of one that
  committed: a fill must not bring a deleted token back),
- an authoritative write (token_write) came at or after ARGV[2]: its data is
  newer than the read, or
- more than ARGV[4] ms passed since ARGV[2]: the tombstone of a deletion
  committed during the read lasts longer than that, so a slower fill cannot
  tell whether it missed one.
KEYS[1] seckill:auth:{<digest>}   hash "u" -> user blob, "w" -> ms of the last authoritative write
ARGV[1] user blob ("-": refused)  ARGV[2] Redis ms before MySQL was read
ARGV[3] the record's lifetime (ms)  ARGV[4] the fill budget (ms)
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
