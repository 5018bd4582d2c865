-- EPOCH: the store's epoch, started if missing. KEYS: marker.
-- ARGV: 1 max ttl ms for a new store. Reply: {epoch, max ttl, age}.
local now = now_ms()
local m = settle(now, ARGV[1])
return { int(m.epoch), int(m.max_ttl), int(age_of(m, now)) }
