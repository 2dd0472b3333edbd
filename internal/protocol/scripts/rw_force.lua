-- rw_force.lua: free a read-write lock whoever holds it (unlock --force);
-- whoever waited is told, as after a release.
--
-- KEYS[1]  (go: Lock) lock hash
-- KEYS[2]  (go: Readers) readers
-- KEYS[3]  (go: Queue) writers' queue,
-- KEYS[4]  (go: Alive) writers' places
-- KEYS[5]  (go: RQueue) waiting readers
-- KEYS[6]  (go: RPhase) admitted
--          readers (see lib_rw.lua)
-- KEYS[7]  (go: Dead) dead (bury.lua's set): where the receipt is left
-- ARGV[1]  (go: Wake) channel base
-- ARGV[2]  (go: Wake) publish command (PUBLISH or SPUBLISH)
-- ARGV[3]  (go: ID) the ForceUnlock's id
-- ARGV[4]  (go: ReceiptTTL) its receipt's TTL in ms
--
-- Returns  1 if there was a lock to free, 0 if not
--
-- Sent again: a copy answers as its first copy did (forced_before in
-- lib_queue.lua).
local again = forced_before(KEYS[7], ARGV[3])
if again then
  return again -- a copy of a force that ran
end
local had = math.min(redis.call('DEL', KEYS[1], KEYS[2]), 1)
forced(KEYS[7], ARGV[3], had, ARGV[4])
hand_on_rw(KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[1], ARGV[2], true)
return had
