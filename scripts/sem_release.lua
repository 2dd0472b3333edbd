-- sem_release.lua: give a holder's permits back and tell the waiters how
-- many permits are free now.
--
-- KEYS[1]  holders hash (see lib_sem.lua)
-- KEYS[2]  leases: token -> hold expiry (server ms)
-- KEYS[3]  capacity (never expires)
-- ARGV[1]  owner token
-- ARGV[2]  holds to leave (permits are not re-entrant: always 0)
-- ARGV[3]  channel, ARGV[4] publish command (PUBLISH or SPUBLISH)
--
-- Returns  1 done, -1 the caller holds nothing
if redis.call('HEXISTS', KEYS[1], 'p:' .. ARGV[1]) == 0 then
  return NOT_HELD
end
drop(KEYS[1], KEYS[2], ARGV[1])
local free = tonumber(redis.call('GET', KEYS[3]) or '0') - used(KEYS[1])
if free > 0 then
  redis.call(ARGV[4], ARGV[3], WAKE_FREE .. string.format('%d', free))
end
return 1
