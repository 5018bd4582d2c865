-- Shared by every script (prepended to each). KEYS[1] is always the
-- store's epoch marker, KEYS[2] (where used) the key's record. Numbers
-- are written with int(): Lua's tostring would print 1e+15.
local ORIGIN_S = 1704067200
local INFO = {}

local function int(n)
  return string.format('%.0f', n)
end

-- The server's clock, in ms since the Unix epoch.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The hex field `name` of the INFO `section`, asked for once a script.
local function info(section, name)
  if not INFO[name] then
    INFO[name] = string.match(redis.call('INFO', section), name .. ':(%x+)')
  end
  return INFO[name]
end

-- This server process's run id: new at every start, and different on a
-- promoted replica.
local function run_id()
  return info('server', 'run_id')
end

-- This server's replication history: a new id whenever it becomes a
-- primary (promoted, or restarted) and whenever it loads a primary's data
-- as a replica. A demoted primary that resynchronised from its replica and
-- was promoted again (failback) keeps its run_id, but not this.
local function replid()
  return info('replication', 'master_replid')
end

-- The replication history this server followed before it was promoted
-- (all zeros if it never was): its data is a prefix of that history.
local function replid2()
  return info('replication', 'master_replid2')
end

-- The store's epoch if the marker was written by this very server
-- process in its present replication history, else nil (and what the
-- marker holds, if anything). A marker of a protocol above CARRYING_PROTOCOL (put
-- in front of the prelude by the backend) ends the script with the error
-- `LEASEHOLD_PROTOCOL <found>`: every script reads the marker before it
-- writes anything (release only ends its own lease first).
local function current_epoch()
  local m = redis.call('HMGET', KEYS[1], 'epoch', 'max_ttl_ms', 'start_ms', 'run_id', 'high',
                       'replid', 'proven', 'protocol', 'carry_from')
  if m[8] then
    local p = tonumber(m[8])
    if not p or p ~= math.floor(p) or p < 1 or p > CARRYING_PROTOCOL then
      return error({ err = 'LEASEHOLD_PROTOCOL ' .. m[8] })
    end
  end
  if not m[1] or m[4] ~= run_id() or m[6] ~= replid() then
    return nil, m
  end
  local epoch = tonumber(m[1])
  return { epoch = epoch, max_ttl = tonumber(m[2]), start = tonumber(m[3]),
           high = tonumber(m[5]) or 0, proven = m[7] == '1',
           from = tonumber(m[9]) or epoch }, m
end

-- Whether leases granted in `epoch` are honoured in the current epoch `m`:
-- its own, and, after a promotion, those of the epochs it carries (see
-- check_epoch).
local function honoured(m, epoch)
  local e = tonumber(epoch)
  return m ~= nil and e ~= nil and e >= m.from and e <= m.epoch
end

-- The current epoch, starting a new one when the marker is missing (a new
-- or emptied store) or was written by another server process or in another
-- replication history (a restart, a failover, a failback: each may have
-- lost the last writes). A new epoch is the
-- server clock's next whole second since 2024-01-01, and above the old
-- marker's; its start is that second, so grants (which wait at least the
-- max TTL from the start) happen only once it has begun.
-- With `proven` (the creator states that no earlier store existed:
-- `leasehold init --new`), a store with no marker and no key index at all
-- gets a proven epoch: `proven` in the marker, reported as the longest age
-- there is (settled at once). Any later epoch clears it.
local function check_epoch(now, default_max_ttl, proven, index)
  local m, old = current_epoch()
  if m then
    return m
  end
  -- A new store: neither a marker (of any server process) nor keys.
  local new = not old[1] and index ~= nil and redis.call('EXISTS', index) == 0
  proven = proven and new
  local e = math.floor(now / 1000) + 1 - ORIGIN_S
  if e < 1 then e = 1 end
  local prev = tonumber(old[1])
  if prev and e <= prev then e = prev + 1 end
  -- A promoted replica (this server followed, before its promotion, the
  -- history the marker was written in) holds a prefix of the old
  -- primary's writes: the leases whose records it has are carried into
  -- the new epoch (their holders renew here and keep working), while any
  -- grant it missed is void; the new epoch's quarantine outlasts the
  -- holders of those. (So does a primary restarted from an RDB file with
  -- replication information, which Redis 7 loads as its master_replid2:
  -- its data is a prefix of that history too.) Any other new server
  -- process carries nothing.
  local from = e
  if prev and old[6] and old[4] ~= run_id() and old[6] == replid2() then
    from = tonumber(old[9]) or prev
  end
  m = { epoch = e, max_ttl = tonumber(old[2]) or tonumber(default_max_ttl),
        start = (e + ORIGIN_S) * 1000, high = tonumber(old[5]) or 0, from = from }
  redis.call('HSET', KEYS[1], 'epoch', int(m.epoch), 'max_ttl_ms', int(m.max_ttl),
             'start_ms', int(m.start), 'run_id', run_id(), 'high', int(m.high),
             'replid', replid(), 'protocol', int(from < e and CARRYING_PROTOCOL or PROTOCOL))
  if from < e then
    redis.call('HSET', KEYS[1], 'carry_from', int(from))
  else
    redis.call('HDEL', KEYS[1], 'carry_from')
  end
  if proven then
    redis.call('HSET', KEYS[1], 'proven', '1')
    m.proven = true
  else
    redis.call('HDEL', KEYS[1], 'proven')
  end
  return m, new
end

-- The epoch a script on an existing lease (renew, release, record a run,
-- break, inspect) works in: the current one; or, on a promoted replica
-- whose marker is of the history it was promoted from, the new epoch that
-- carries those leases (see check_epoch): started here when `write`, so
-- that a holder's first renewal after a failover is not refused for want
-- of an acquire, else only as it would be (nothing written). Any other
-- marker of another server process: nil (its leases are void).
local function lease_epoch(now, write)
  local m, old = current_epoch()
  if m or not old[1] or old[4] == run_id() or not old[6] or old[6] ~= replid2() then
    return m
  end
  if write then
    return (check_epoch(now, old[2], false, nil))
  end
  local prev = tonumber(old[1])
  return { epoch = prev + 1, from = tonumber(old[9]) or prev, start = now, high = 0 }
end

-- The epoch's age in ms by the server's clock; -1 for a proven epoch.
local function age_of(m, now)
  if m.proven then
    return -1
  end
  local age = now - m.start
  if age < 0 then age = 0 end
  return age
end

-- Whether the record's lease is live: set, granted in an epoch the current
-- one honours, and not past its expiry by the server's clock.
local function live(m, lease_id, epoch, expires, now)
  return lease_id ~= false and honoured(m, epoch) and (tonumber(expires) or 0) > now
end

-- The holder fields of a record (false where a field is missing).
local function holder(key, now)
  local h = redis.call('HMGET', key, 'owner_host', 'owner_pid', 'owner_label', 'data',
                       'fence', 'acquired_ms', 'expires_ms', 'ttl_ms')
  return { h[1], h[2], h[3], h[4], h[5], h[6], int((tonumber(h[7]) or now) - now), h[8] }
end
