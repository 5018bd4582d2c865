-- RELEASE. KEYS: marker, record. ARGV: 1 lease id, 2 epoch, 3 channel
-- ('' for none), 4 key. Reply: 'ok', or why not: 'free', 'other', 'epoch'
-- (the lease was of an epoch that ended: cleared all the same).
local r = redis.call('HMGET', KEYS[2], 'lease_id', 'epoch')
if r[1] ~= ARGV[1] then
  if r[1] then return 'other' end
  return 'free'
end
redis.call('HDEL', KEYS[2], 'lease_id', 'expires_ms')
if ARGV[3] ~= '' then
  redis.call('PUBLISH', ARGV[3], ARGV[4])
end
local m = lease_epoch(now_ms(), true)
if not honoured(m, ARGV[2]) or tonumber(r[2]) ~= tonumber(ARGV[2]) then
  return 'epoch'
end
return 'ok'
