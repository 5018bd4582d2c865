-- INSPECT / LIST. KEYS: marker, then (inspect) the record, or (list) the
-- index. ARGV (list): 1 the records' key prefix, 2 lex min, 3 lex max,
-- 4 the key-name prefix. Reply: one entry per key with a record:
-- {key name or false, fence, live holder or false, last success,
-- its end ms, last run, its end ms}.
local now = now_ms()
local m = lease_epoch(now, false)
local function entry(record, name)
  local r = redis.call('HMGET', record, 'fence', 'lease_id', 'epoch', 'expires_ms',
                       'last_success', 'last_success_end_ms', 'last_run', 'last_run_end_ms')
  if not r[1] then
    return nil
  end
  local h = false
  if live(m, r[2], r[3], r[4], now) then
    h = holder(record, now)
  end
  return { name, r[1], h, r[5], r[6], r[7], r[8] }
end
if #ARGV == 0 then
  local e = entry(KEYS[2], false)
  if e then return { e } end
  return {}
end
local out = {}
local prefix = ARGV[4]
for _, name in ipairs(redis.call('ZRANGEBYLEX', KEYS[2], ARGV[2], ARGV[3])) do
  if string.sub(name, 1, #prefix) == prefix then
    local e = entry(ARGV[1] .. name, name)
    if e then out[#out + 1] = e end
  end
end
return out
