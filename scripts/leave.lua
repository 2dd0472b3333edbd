-- leave.lua: a waiter of a mutex or of an RWMutex's write side gives up its
-- place; if the lock is free (or was kept for it), the next waiter is told.
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue, KEYS[3] alive (see lib_queue.lua)
-- ARGV[1]  the waiter's member
-- ARGV[2]  channel base, ARGV[3] publish command (PUBLISH or SPUBLISH)
-- ARGV[4]  '1' to keep the lock for the waiter told (a mutex, not on a
--          quorum)
--
-- Returns  1
unqueue(KEYS[2], KEYS[3], ARGV[1])
local free = redis.call('EXISTS', KEYS[1]) == 0
if not free and reserved_for(KEYS[1], ARGV[1]) then
  redis.call('DEL', KEYS[1])
  free = true
end
if free then
  hand_on(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], ARGV[4] == '1')
end
return 1
