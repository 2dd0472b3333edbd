-- rw_force.lua: free a read-write lock whoever holds it (unlock --force);
-- whoever waited is told, as after a release.
--
-- KEYS[1]  lock hash, KEYS[2] readers, KEYS[3] writers' queue,
-- KEYS[4]  writers' places, KEYS[5] waiting readers, KEYS[6] admitted
--          readers (see lib_rw.lua)
-- ARGV[1]  channel base, ARGV[2] publish command (PUBLISH or SPUBLISH)
--
-- Returns  1 if there was a lock to free, 0 if not
local had = redis.call('DEL', KEYS[1], KEYS[2])
hand_on_rw(KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[1], ARGV[2], true)
return math.min(had, 1)
