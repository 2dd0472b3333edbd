-- sem_force.lua: take back every permit of a semaphore (unlock --force);
-- the waiters that now fit are told. The capacity stays.
--
-- KEYS[1]  holders hash, KEYS[2] leases, KEYS[3] capacity (see lib_sem.lua)
-- KEYS[4]  queue, KEYS[5] alive (see lib_queue.lua)
-- KEYS[6]  dead (bury.lua's set): where the receipt is left
-- ARGV[1]  channel base, ARGV[2] publish command (PUBLISH or SPUBLISH)
-- ARGV[3]  the ForceUnlock's id, ARGV[4] its receipt's TTL in ms
--
-- Returns  1 if permits were held, 0 if not
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
--
-- Sent again: a client library sends a call again when it lost the reply,
-- and the server may run both copies; between them another owner may take
-- the freed lock. The first copy leaves its receipt, 'force:<id>:<reply>',
-- in the dead set (owner tokens are hex: no acquire is refused for it),
-- and a copy that finds it changes nothing and answers the same reply:
-- one ForceUnlock ends the holds it found, never the next owner's
-- (forceReceipt in inspect.go).
local rc = 'force:' .. ARGV[3] .. ':'
for _, had in ipairs({1, 0}) do
  if redis.call('ZSCORE', KEYS[6], rc .. had) then
    return had -- a copy of a force that ran
  end
end
local had = math.min(redis.call('DEL', KEYS[1], KEYS[2]), 1)
receipt(KEYS[6], rc .. had, ARGV[4])
wake_fitting(KEYS[4], KEYS[5], tonumber(redis.call('GET', KEYS[3]) or '0'), ARGV[1], ARGV[2])
return had
