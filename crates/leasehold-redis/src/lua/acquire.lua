-- ACQUIRE. KEYS: marker, record, index. ARGV: 1 key, 2 lease id, 3 ttl ms,
-- 4 epoch asked for (0: none), 5 max ttl ms for a new store, 6 host,
-- 7 pid, 8 label ('' none, else '+' .. label), 9 data (same).
-- Reply: {1, token} granted; {2, holder} held; {3, epoch, max ttl, age}
-- other epoch; {4, max ttl} TTL above the store's max TTL; {5, ms} the
-- epoch begins in ms (nothing granted: ask again then).
local now = now_ms()
local m = check_epoch(now, ARGV[5])
if tonumber(ARGV[4]) ~= m.epoch then
  return { 3, int(m.epoch), int(m.max_ttl), int(age_of(m, now)) }
end
local ttl = tonumber(ARGV[3])
if ttl > m.max_ttl then
  return { 4, int(m.max_ttl) }
end
if now < m.start then
  -- No grant in an epoch before its first second begins on this clock: a
  -- store lost and started again before then would get the same epoch
  -- (the next second), and repeat this grant's token. After it, a new
  -- epoch is a later second. (A proven epoch is granted in at once, so
  -- this is the only wait it has; any other is quarantined far longer.)
  return { 5, int(m.start - now) }
end
local r = redis.call('HMGET', KEYS[2], 'fence', 'epoch', 'lease_id', 'expires_ms')
if r[3] and honoured(m, r[2]) then
  if r[3] == ARGV[2] and tonumber(r[2]) == m.epoch then
    -- Our own lease asked for again (a retry): extended, same token.
    redis.call('HSET', KEYS[2], 'expires_ms', int(now + ttl), 'ttl_ms', int(ttl))
    return { 1, r[1] }
  end
  if (tonumber(r[4]) or 0) > now then
    return { 2, holder(KEYS[2], now) }
  end
end
local base = m.epoch * 4194304
if not r[1] and redis.call('ZADD', KEYS[3], 'NX', 0, ARGV[1]) == 0 then
  -- The index knows the key but its record is gone (deleted by hand, or
  -- evicted): above every token this store issued. (A new key starts at
  -- the epoch's base, as its observers expect.)
  if m.high > base then base = m.high end
end
local token = (tonumber(r[1]) or 0)
if token < base then token = base end
token = token + 1
redis.call('HSET', KEYS[2], 'fence', int(token), 'epoch', int(m.epoch), 'lease_id', ARGV[2],
           'expires_ms', int(now + ttl), 'ttl_ms', int(ttl), 'owner_host', ARGV[6],
           'owner_pid', ARGV[7], 'acquired_ms', int(now))
for i, field in ipairs({ 'owner_label', 'data' }) do
  local v = ARGV[7 + i]
  if v == '' then
    redis.call('HDEL', KEYS[2], field)
  else
    redis.call('HSET', KEYS[2], field, string.sub(v, 2))
  end
end
if token > m.high then
  redis.call('HSET', KEYS[1], 'high', int(token))
end
return { 1, int(token) }
