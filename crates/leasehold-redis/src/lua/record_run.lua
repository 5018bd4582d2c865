-- RECORD RUN. KEYS: marker, record. ARGV: 1 lease id, 2 epoch, 3 the run
-- (JSON), 4 its fencing token, 5 '1' if it succeeded. The end is stamped
-- with the server's clock (*_end_ms). Reply: 'ok' (written under our
-- lease), or why not: 'free', 'other', 'epoch'.
local now = now_ms()
local r = redis.call('HMGET', KEYS[2], 'fence', 'lease_id', 'epoch', 'last_run_token')
if not r[1] then
  return 'free' -- never create a record
end
local m = lease_epoch(now, true)
local same_epoch = honoured(m, ARGV[2]) and tonumber(r[3]) == tonumber(ARGV[2])
if r[2] == ARGV[1] and same_epoch then
  redis.call('HSET', KEYS[2], 'last_run', ARGV[3], 'last_run_end_ms', int(now),
             'last_run_token', ARGV[4])
  if ARGV[5] == '1' then
    redis.call('HSET', KEYS[2], 'last_success', ARGV[3], 'last_success_end_ms', int(now))
  end
  return 'ok'
end
-- Not under our lease: never the success; a failure only over an
-- earlier run's record.
if ARGV[5] ~= '1' and (not r[4] or tonumber(r[4]) < tonumber(ARGV[4])) then
  redis.call('HSET', KEYS[2], 'last_run', ARGV[3], 'last_run_end_ms', int(now),
             'last_run_token', ARGV[4])
end
if r[2] == ARGV[1] then return 'epoch' end
if r[2] then return 'other' end
return 'free'
