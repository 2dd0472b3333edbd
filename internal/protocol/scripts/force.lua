-- force.lua: free a mutex whoever holds it (an operator's unlock --force);
-- the next waiter gets it as from a release. Its holder learns of the loss
-- at its next renewal.
--
-- KEYS[1]  (go: Lock) lock: the hold, one string (lib_mutex.lua)
-- KEYS[2]  (go: Fence) fence counter
-- KEYS[3]  (go: Queue) queue
-- KEYS[4]  (go: Alive) alive
-- KEYS[5]  (go: Dead) dead (bury.lua's set): where the receipt is left
-- ARGV[1]  (go: Wake) channel base
-- ARGV[2]  (go: Wake) publish command (PUBLISH or SPUBLISH)
-- ARGV[3]  (go: ID) the ForceUnlock's id
-- ARGV[4]  (go: ReceiptTTL) its receipt's TTL in ms
-- ARGV[5]  (go: Observers, if Election) an Election's observers' channel,
--          told 'all' (absent for a mutex)
--
-- Returns  1 if there was a lock to free, 0 if not
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
--
-- Sent again: a copy answers as its first copy did (forced_before in
-- lib_queue.lua).
local again = forced_before(KEYS[5], ARGV[3])
if again then
  return again -- a copy of a force that ran
end
local had = redis.call('DEL', KEYS[1])
forced(KEYS[5], ARGV[3], had, ARGV[4])
hand_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], true)
if ARGV[5] then
  publish(ARGV[2], ARGV[5], WAKE_ALL)
end
return had
