-- sem_permits.lua: read, and optionally set, the semaphore's capacity.
--
-- KEYS[1]  (go: Lock) holders hash (see lib_sem.lua)
-- KEYS[2]  (go: Leases) leases: token -> hold expiry (server ms)
-- KEYS[3]  (go: Permits) capacity (see lib_sem.lua)
-- KEYS[4]  (go: Queue) queue
-- KEYS[5]  (go: Alive) alive (see lib_queue.lua)
-- ARGV[1]  (go: Capacity) the capacity it has if it has none yet (not
--          written: a semaphore nobody uses keeps no key)
-- ARGV[2]  (go: Set) new capacity (kept until changed: it never expires), or
--          0 to leave it as it is
-- ARGV[3]  (go: Wake) channel base
-- ARGV[4]  (go: Wake) publish command (PUBLISH or SPUBLISH)
--
-- Returns  {capacity, permits held}
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
--
-- Lowering the capacity below what is held takes nothing away: new
-- acquires wait until enough is given back. Raising it tells the waiters
-- that now fit.
expire_holders(KEYS[1], KEYS[2], now_ms())
local cap = tonumber(redis.call('GET', KEYS[3]) or ARGV[1])
local held = used(KEYS[1])
if tonumber(ARGV[2]) > 0 then
  redis.call('SET', KEYS[3], ARGV[2])
  if tonumber(ARGV[2]) > cap and tonumber(ARGV[2]) > held then
    wake_fitting(KEYS[4], KEYS[5], tonumber(ARGV[2]) - held, ARGV[3], ARGV[4])
  end
  cap = tonumber(ARGV[2])
end
return {cap, held}
