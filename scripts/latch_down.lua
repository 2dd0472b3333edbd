-- latch_down.lua: count a latch down by one; at zero it is deleted and
-- every waiter is woken.
--
-- KEYS[1]  count
-- KEYS[2]  ids that have counted down (for CountDownOnce)
-- ARGV[1]  the caller's id, counted once; '' to count every call
-- ARGV[2]  channel, ARGV[3] publish command (PUBLISH or SPUBLISH)
--
-- Returns  the count left (0 when the latch is open or does not exist)
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
local c = tonumber(redis.call('GET', KEYS[1]))
if not c then
  return 0
end
if ARGV[1] ~= '' then
  if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
    return c
  end
  redis.call('PEXPIRE', KEYS[2], redis.call('PTTL', KEYS[1]))
end
c = redis.call('DECR', KEYS[1])
if c <= 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
  publish(ARGV[3], ARGV[2], WAKE_ALL)
  return 0
end
return c
