-- ACQUIRE ALL: several keys, all or none (a multi-key lock's first
-- attempt). KEYS: marker, index, then each key's record. ARGV: 1 epoch
-- asked for, 2 max ttl ms for a new store, then per key (in the records'
-- order) seven: key, lease id, ttl ms, host, pid, label, data (as
-- acquire.lua's). Every key is judged before any is granted, and the
-- script runs alone on the server: all are granted, or nothing is written.
-- Reply: {1, {token, ...}} granted; {2, holder, index (from 0)} that key is
-- held; 3, 4 and 5 as acquire.lua's.
local now = now_ms()
local m = check_epoch(now, ARGV[2])
if tonumber(ARGV[1]) ~= m.epoch then
  return { 3, int(m.epoch), int(m.max_ttl), int(age_of(m, now)) }
end
local n = #KEYS - 2
local function arg(i, j)
  return ARGV[2 + (i - 1) * 7 + j]
end
for i = 1, n do
  if tonumber(arg(i, 3)) > m.max_ttl then
    return { 4, int(m.max_ttl) }
  end
end
if now < m.start then
  -- As acquire.lua.
  return { 5, int(m.start - now) }
end
local verdicts, rows = {}, {}
for i = 1, n do
  local verdict, r = judge(m, KEYS[2 + i], arg(i, 2), now)
  if verdict == 'held' then
    return { 2, holder(KEYS[2 + i], now), i - 1 }
  end
  verdicts[i], rows[i] = verdict or false, r
end
local tokens = {}
for i = 1, n do
  tokens[i] = grant(m, now, KEYS[2], KEYS[2 + i], rows[i], verdicts[i] or nil, arg(i, 1),
                    arg(i, 2), tonumber(arg(i, 3)), arg(i, 4), arg(i, 5), arg(i, 6), arg(i, 7))
end
return { 1, tokens }
