-- rw_leave.lua: a waiter of the read-write lock gives up its place. When a
-- writer leaves, whoever it held up is told: the waiting readers, admitted,
-- when no writer waits any more, and the next writer if the lock is free.
-- When a reader admitted by a writer's release leaves and it was the last
-- of them to come, the next writer is told if the lock is free.
--
-- KEYS[1]  (go: Lock) lock hash (see lib_rw.lua)
-- KEYS[2]  (go: Queue) writers' queue
-- KEYS[3]  (go: Alive) writers' places (see lib_queue.lua)
-- KEYS[4]  (go: RQueue) waiting readers
-- KEYS[5]  (go: RPhase) admitted readers (see lib_rw.lua)
-- ARGV[1]  (go: Member) the waiter's member
-- ARGV[2]  (go: Side) 'r' for a reader, 'w' for a writer
-- ARGV[3]  (go: Wake) channel base
-- ARGV[4]  (go: Wake) publish command (PUBLISH or SPUBLISH)
--
-- Returns  1
if ARGV[2] == 'r' then
  redis.call('ZREM', KEYS[4], ARGV[1], ARGV[1] .. ':p')
  if redis.call('ZREM', KEYS[5], ARGV[1], ARGV[1] .. ':p') > 0
      and not redis.call('HGET', KEYS[1], 'mode') and not phase_pending(KEYS[5], now_ms()) then
    call_next(KEYS[2], KEYS[3], ARGV[3], ARGV[4])
  end
  return 1
end
unqueue(KEYS[2], KEYS[3], ARGV[1])
hand_on_rw(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[3], ARGV[4], false)
return 1
