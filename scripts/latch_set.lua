-- latch_set.lua: set a count-down latch's count, if it has none.
--
-- KEYS[1]  count
-- KEYS[2]  ids that have counted down (for CountDownOnce)
-- ARGV[1]  count, n >= 1
-- ARGV[2]  TTL of the latch in milliseconds
--
-- Returns  1 set, 0 the latch already has a count
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('DEL', KEYS[2])
  return 1
end
return 0
