-- sem_release.lua: give a holder's permits back and tell the waiters, in
-- order, whose permits now fit.
--
-- KEYS[1]  (go: Lock) holders hash (see lib_sem.lua)
-- KEYS[2]  (go: Leases) leases: token -> hold expiry (server ms)
-- KEYS[3]  (go: Permits) capacity (see lib_sem.lua)
-- KEYS[4]  (go: Queue) queue
-- KEYS[5]  (go: Alive) alive (see lib_queue.lua)
-- ARGV[1]  (go: Token) owner token
-- ARGV[2]  (go: Left) holds to leave (permits are not re-entrant: always 0)
-- ARGV[3]  (go: Wake) channel base
-- ARGV[4]  (go: Wake) publish command (PUBLISH or SPUBLISH)
-- ARGV[5]  (go: ReceiptTTL, if Receipt) optional: the hold's lease TTL in
--          milliseconds, with
-- KEYS[6]  (go: Dead, if Receipt) dead (the ledger, lib_queue.lua): the
--          receipt of the release, as in rw_unlock.lua: a copy sent again
--          answers done, not -1; a burial alone answers -1
--
-- Returns  1 done, -1 the caller holds nothing
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
if redis.call('HEXISTS', KEYS[1], 'p:' .. ARGV[1]) == 0 then
  if sent_again(KEYS[6], ARGV[1], ARGV[5]) then
    return 1 -- this release, sent again: it ran
  end
  return NOT_HELD
end
if ARGV[5] then
  receipt(KEYS[6], ARGV[1], ARGV[5])
end
drop(KEYS[1], KEYS[2], ARGV[1])
local free = tonumber(redis.call('GET', KEYS[3]) or '0') - used(KEYS[1])
wake_fitting(KEYS[4], KEYS[5], free, ARGV[3], ARGV[4])
return 1
