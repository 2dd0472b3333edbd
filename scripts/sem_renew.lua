-- sem_renew.lua: extend a holder's permits.
--
-- KEYS[1]  holders hash (see lib_sem.lua)
-- KEYS[2]  leases: token -> hold expiry (server ms)
-- ARGV[1]  owner token
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  '1' to set the hold's expiry to exactly now + ARGV[2] (Extend);
--          '0' to make it at least that (a watchdog renewal, which must
--          not shorten what an Extend lengthened)
--
-- Returns  1 renewed, 0 the caller holds nothing (expired): its lease is lost
local now = now_ms()
local until_ms = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]) or '0')
if until_ms <= now or redis.call('HEXISTS', KEYS[1], 'p:' .. ARGV[1]) == 0 then
  return 0
end
local want = now + tonumber(ARGV[2])
if ARGV[3] == '1' or want > until_ms then
  redis.call('ZADD', KEYS[2], want, ARGV[1])
end
stretch(KEYS[1], ARGV[2])
stretch(KEYS[2], ARGV[2])
return 1
