-- sem_force.lua: take back every permit of a semaphore (unlock --force);
-- the waiters that now fit are told. The capacity stays.
--
-- KEYS[1]  holders hash, KEYS[2] leases, KEYS[3] capacity (see lib_sem.lua)
-- KEYS[4]  queue, KEYS[5] alive (see lib_queue.lua)
-- ARGV[1]  channel base, ARGV[2] publish command (PUBLISH or SPUBLISH)
--
-- Returns  1 if permits were held, 0 if not
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
local had = redis.call('DEL', KEYS[1], KEYS[2])
wake_fitting(KEYS[4], KEYS[5], tonumber(redis.call('GET', KEYS[3]) or '0'), ARGV[1], ARGV[2])
return math.min(had, 1)
