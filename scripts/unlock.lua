-- unlock.lua: release holds of the reentrant mutex.
--
-- KEYS[1]  lock hash: owner token -> hold count
-- ARGV[1]  owner token
-- ARGV[2]  holds to leave: n >= 1 keeps the lock with count n; 0 frees it
-- ARGV[3]  channel told when the lock becomes free
-- ARGV[4]  publish command: PUBLISH, or SPUBLISH on a cluster
--
-- Returns  1   done
--          -1  the caller holds nothing: its lease was lost, or never held
--
-- Idempotent: the count is set, not subtracted from, so a retried call
-- changes nothing more. (A retried call that freed the lock finds nothing
-- and answers -1: the caller cannot tell it from a lease lost.)
local held = set_holds(KEYS[1], ARGV[1], ARGV[2])
if held ~= 0 then
  return held
end
redis.call(ARGV[4], ARGV[3], WAKE_ONE)
return 1
