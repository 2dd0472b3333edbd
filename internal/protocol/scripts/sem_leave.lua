-- sem_leave.lua: a semaphore waiter gives up its place; the waiters that
-- now fit (it may have been first) are told.
--
-- KEYS[1]  (go: Lock) holders hash (see lib_sem.lua)
-- KEYS[2]  (go: Leases) leases: token -> hold expiry (server ms)
-- KEYS[3]  (go: Permits) capacity (see lib_sem.lua)
-- KEYS[4]  (go: Queue) queue
-- KEYS[5]  (go: Alive) alive (see lib_queue.lua)
-- ARGV[1]  (go: Member) the waiter's member
-- ARGV[2]  (go: Wake) channel base
-- ARGV[3]  (go: Wake) publish command (PUBLISH or SPUBLISH)
--
-- Returns  1
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
unqueue(KEYS[4], KEYS[5], ARGV[1])
expire_holders(KEYS[1], KEYS[2], now_ms())
local free = tonumber(redis.call('GET', KEYS[3]) or '0') - used(KEYS[1])
wake_fitting(KEYS[4], KEYS[5], free, ARGV[2], ARGV[3])
return 1
