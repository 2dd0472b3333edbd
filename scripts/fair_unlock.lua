-- fair_unlock.lua: release holds of the fair mutex; when it becomes free,
-- tell the first waiter in the queue (and only it).
--
-- KEYS[1]  lock hash: owner token -> hold count
-- KEYS[2]  queue: token -> arrival (server µs)
-- KEYS[3]  alive: token -> place expiry (server ms)
-- ARGV[1]  owner token
-- ARGV[2]  holds to leave: n >= 1 keeps the lock with count n; 0 frees it
-- ARGV[3]  channel, ARGV[4] publish command (PUBLISH or SPUBLISH)
--
-- Returns  1 done, -1 the caller holds nothing
local held = set_holds(KEYS[1], ARGV[1], ARGV[2])
if held ~= 0 then
  return held
end
call_next(KEYS[2], KEYS[3], now_ms(), ARGV[3], ARGV[4])
return 1
