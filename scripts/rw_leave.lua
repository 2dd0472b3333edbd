-- rw_leave.lua: a waiter of the read-write lock gives up its place. When a
-- writer leaves, whoever it held up is told: the next writer if the lock
-- is free, and the readers that may go now.
--
-- KEYS[1]  lock hash (see lib_rw.lua)
-- KEYS[2]  writers' queue, KEYS[3] writers' places (see lib_queue.lua)
-- KEYS[4]  waiting readers (see lib_rw.lua)
-- ARGV[1]  the waiter's member
-- ARGV[2]  'r' for a reader, 'w' for a writer
-- ARGV[3]  channel base, ARGV[4] publish command (PUBLISH or SPUBLISH)
--
-- Returns  1
if ARGV[2] == 'r' then
  redis.call('ZREM', KEYS[4], ARGV[1], ARGV[1] .. ':p')
  return 1
end
unqueue(KEYS[2], KEYS[3], ARGV[1])
hand_on_rw(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[4])
return 1
