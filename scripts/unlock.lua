-- unlock.lua: release holds of the reentrant mutex (Mutex or FairMutex);
-- when it becomes free, hand it to the first waiter (lib_mutex.lua).
--
-- KEYS[1]  lock hash: owner token -> hold count
-- KEYS[2]  fence counter (for a waiter handed the lock)
-- KEYS[3]  queue, KEYS[4] alive (see lib_queue.lua)
-- ARGV[1]  owner token
-- ARGV[2]  holds to leave: n >= 1 keeps the lock with count n; 0 frees it
-- ARGV[3]  channel base, ARGV[4] publish command (PUBLISH or SPUBLISH)
-- ARGV[5]  '1' to hand the lock to the waiter told, or keep it for it (not
--          on a quorum)
--
-- Returns  1   done
--          -1  the caller holds nothing: its lease was lost, or never held
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
--
-- Idempotent: the count is set, not subtracted from, so a retried call
-- changes nothing more. (A retried call that freed the lock finds nothing
-- and answers -1: the caller cannot tell it from a lease lost.)
local held = set_holds(KEYS[1], ARGV[1], ARGV[2])
if held ~= 0 then
  return held
end
if redis.call('EXISTS', KEYS[3]) == 0 then
  return 1 -- nobody waits: the common case, before the helpers
end
-- @helpers
hand_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[4], ARGV[5] == '1', ARGV[1])
return 1
