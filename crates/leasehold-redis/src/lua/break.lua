-- BREAK. KEYS: marker, record. ARGV: 1 channel ('' for none), 2 key.
-- Reply: {1, holder} when a live lease was ended, else {0}.
local r = redis.call('HMGET', KEYS[2], 'lease_id', 'epoch', 'expires_ms')
if not r[1] then
  return { 0 }
end
local now = now_ms()
local reply = { 0 }
if live(lease_epoch(now, false), r[1], r[2], r[3], now) then
  reply = { 1, holder(KEYS[2], now) }
end
redis.call('HDEL', KEYS[2], 'lease_id', 'expires_ms')
if ARGV[1] ~= '' then
  redis.call('PUBLISH', ARGV[1], ARGV[2])
end
return reply
