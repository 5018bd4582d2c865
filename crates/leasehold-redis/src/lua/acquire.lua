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
local verdict, r = judge(m, KEYS[2], ARGV[2], now)
if verdict == 'held' then
  return { 2, holder(KEYS[2], now) }
end
return { 1, grant(m, now, KEYS[3], KEYS[2], r, verdict, ARGV[1], ARGV[2], ttl, ARGV[6], ARGV[7],
                  ARGV[8], ARGV[9]) }
