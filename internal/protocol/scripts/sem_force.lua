-- sem_force.lua: take back every permit of a semaphore (unlock --force);
-- the waiters that now fit are told. The capacity stays.
--
-- KEYS[1]  (go: Lock) holders hash
-- KEYS[2]  (go: Leases) leases
-- KEYS[3]  (go: Permits) capacity (see lib_sem.lua)
-- KEYS[4]  (go: Queue) queue
-- KEYS[5]  (go: Alive) alive (see lib_queue.lua)
-- KEYS[6]  (go: Dead) dead (bury.lua's set): where the receipt is left
-- ARGV[1]  (go: Wake) channel base
-- ARGV[2]  (go: Wake) publish command (PUBLISH or SPUBLISH)
-- ARGV[3]  (go: ID) the ForceUnlock's id
-- ARGV[4]  (go: ReceiptTTL) its receipt's TTL in ms
--
-- Returns  1 if permits were held, 0 if not
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
--
-- Sent again: a copy answers as its first copy did (forced_before in
-- lib_queue.lua).
local again = forced_before(KEYS[6], ARGV[3])
if again then
  return again -- a copy of a force that ran
end
local had = math.min(redis.call('DEL', KEYS[1], KEYS[2]), 1)
forced(KEYS[6], ARGV[3], had, ARGV[4])
wake_fitting(KEYS[4], KEYS[5], tonumber(redis.call('GET', KEYS[3]) or '0'), ARGV[1], ARGV[2])
return had
