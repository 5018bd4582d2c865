-- RENEW. KEYS: marker, record. ARGV: 1 lease id, 2 epoch, 3 ttl ms.
-- Reply: 'ok', or why not: 'epoch', 'free', 'other', 'expired'.
local now = now_ms()
local m = lease_epoch(now, true)
if not honoured(m, ARGV[2]) then
  return 'epoch'
end
local r = redis.call('HMGET', KEYS[2], 'lease_id', 'epoch', 'expires_ms')
if not r[1] then
  return 'free'
end
if r[1] ~= ARGV[1] or tonumber(r[2]) ~= tonumber(ARGV[2]) then
  return 'other'
end
if (tonumber(r[3]) or 0) <= now then
  return 'expired'
end
redis.call('HSET', KEYS[2], 'expires_ms', int(now + tonumber(ARGV[3])))
return 'ok'
