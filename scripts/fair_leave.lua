-- fair_leave.lua: a waiter gives up its place in the queue; if the lock
-- is free, the new first waiter is told.
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue: token -> arrival (server µs)
-- KEYS[3]  alive: token -> place expiry (server ms)
-- ARGV[1]  the waiter's token
-- ARGV[2]  channel, ARGV[3] publish command (PUBLISH or SPUBLISH)
--
-- Returns  1
unqueue(KEYS[2], KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  call_next(KEYS[2], KEYS[3], now_ms(), ARGV[2], ARGV[3])
end
return 1
