--[[ meta: apply an ops edit of sale data (limit, window, status, price), newest first.
Stock fields are never written here: stock only moves by deltas. A push that
carries an older version than the snapshot holds changes nothing, so two edits
whose pushes arrive out of order leave the newer one in place.
KEYS[1] stock
ARGV[1] per_user_limit  ARGV[2] starts_ms  ARGV[3] ends_ms  ARGV[4] status  ARGV[5] version
ARGV[6] unit_price (decimal text)
Returns 1 updated, 0 no snapshot (the next warm-up reads MySQL), 2 stale push.
]]
if #KEYS ~= 1 or #ARGV ~= 6 then
  return redis.error_reply('meta: expects 1 key and 6 args')
end
local current = redis.call('HGET', KEYS[1], 'version')
if not current then return 0 end
if tonumber(current) >= tonumber(ARGV[5]) then return 2 end
redis.call('HSET', KEYS[1], 'limit', ARGV[1], 'starts', ARGV[2], 'ends', ARGV[3], 'status', ARGV[4],
  'version', ARGV[5], 'price', ARGV[6])
return 1
