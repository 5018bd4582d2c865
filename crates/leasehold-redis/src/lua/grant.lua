-- Shared by acquire.lua and acquire_all.lua (in front of each, after the
-- prelude): one key's check and grant, in the store's epoch `m` (as
-- check_epoch returned it) at `now`.

-- What record `rk` says to an acquisition by `lease_id`: 'held' (another's
-- live lease), 'ours' (our own live lease, asked for again: a retry) or
-- nil (free); and the fields read, for grant().
local function judge(m, rk, lease_id, now)
  local r = redis.call('HMGET', rk, 'fence', 'epoch', 'lease_id', 'expires_ms')
  if r[3] and honoured(m, r[2]) then
    if r[3] == lease_id and tonumber(r[2]) == m.epoch then
      return 'ours', r
    end
    if (tonumber(r[4]) or 0) > now then
      return 'held', r
    end
  end
  return nil, r
end

-- Grants record `rk` of key `key` (index `ik`) to `lease_id` for `ttl` ms,
-- as judge() found it (`verdict`, `r`: not 'held'), and answers its token.
-- `label` and `data` are '' for none, else '+' .. the value.
local function grant(m, now, ik, rk, r, verdict, key, lease_id, ttl, host, pid, label, data)
  if verdict == 'ours' then
    -- Extended, same token.
    redis.call('HSET', rk, 'expires_ms', int(now + ttl), 'ttl_ms', int(ttl))
    return r[1]
  end
  local base = m.epoch * 4194304
  if not r[1] and redis.call('ZADD', ik, 'NX', 0, key) == 0 then
    -- The index knows the key but its record is gone (deleted by hand, or
    -- evicted): above every token this store issued. (A new key starts at
    -- the epoch's base, as its observers expect.)
    if m.high > base then base = m.high end
  end
  local token = (tonumber(r[1]) or 0)
  if token < base then token = base end
  token = token + 1
  redis.call('HSET', rk, 'fence', int(token), 'epoch', int(m.epoch), 'lease_id', lease_id,
             'expires_ms', int(now + ttl), 'ttl_ms', int(ttl), 'owner_host', host,
             'owner_pid', pid, 'acquired_ms', int(now))
  for field, v in pairs({ owner_label = label, data = data }) do
    if v == '' then
      redis.call('HDEL', rk, field)
    else
      redis.call('HSET', rk, field, string.sub(v, 2))
    end
  end
  if token > m.high then
    redis.call('HSET', KEYS[1], 'high', int(token))
    -- The next grant of the same script compares with this one.
    m.high = token
  end
  return int(token)
end
