-- EPOCH: the store's epoch, started if missing. KEYS: marker, index.
-- ARGV: 1 max ttl ms for a new store, 2 'look' (write nothing: the marker
-- as it is, or {} when the prefix has neither marker nor index), 'proven'
-- (a new store's epoch is proven) or ''. Reply: {epoch, max ttl, age}
-- (age -1: proven), and, when not looking, 1 if this call created the
-- store (wrote the first marker under a prefix without keys), else 0.
local now = now_ms()
if ARGV[2] == 'look' then
  local m, old = current_epoch()
  if not m then
    if not old[1] then
      if redis.call('EXISTS', KEYS[2]) == 0 then
        return {}
      end
      -- Keys without a marker (deleted by hand): an epoch of no age.
      return { int(math.floor(now / 1000) - ORIGIN_S), ARGV[1], '0' }
    end
    -- Written by another server process or history: as it is, but not
    -- proven (the next acquirer starts a new epoch, quarantined).
    m = { epoch = tonumber(old[1]), max_ttl = tonumber(old[2]) or tonumber(ARGV[1]),
          start = tonumber(old[3]) or now, proven = false }
  end
  return { int(m.epoch), int(m.max_ttl), int(age_of(m, now)) }
end
local m, new = check_epoch(now, ARGV[1], ARGV[2] == 'proven', KEYS[2])
return { int(m.epoch), int(m.max_ttl), int(age_of(m, now)), new and 1 or 0 }
