-- leave.lua: a waiter of a mutex gives up its place; if the lock is free,
-- or was kept for it or handed to it (a hand-off it will not use), it goes
-- to the next waiter.
--
-- KEYS[1]  (go: Lock) lock: the hold, one string (lib_mutex.lua)
-- KEYS[2]  (go: Fence) fence counter
-- KEYS[3]  (go: Queue) queue
-- KEYS[4]  (go: Alive) alive (see lib_queue.lua)
-- ARGV[1]  (go: Member) the waiter's member
-- ARGV[2]  (go: Wake) channel base
-- ARGV[3]  (go: Wake) publish command (PUBLISH or SPUBLISH)
-- ARGV[4]  (go: Reserve) '1' to hand the lock on or keep it for the next
--          waiter (not on a quorum)
--
-- Returns  1
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
local lock, member = KEYS[1], ARGV[1]
unqueue(KEYS[3], KEYS[4], member)
local free = redis.call('EXISTS', lock) == 0
if not free and (reserved_for(lock, member) or hold_of(lock, token_of(member))) then
  -- a waiter that gives up holds nothing: what it was given goes on
  redis.call('DEL', lock)
  free = true
end
if free then
  hand_on(lock, KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3], ARGV[4] == '1')
end
return 1
