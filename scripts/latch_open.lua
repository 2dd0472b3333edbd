-- latch_open.lua: open a latch whatever its count (unlock --force); its
-- waiters are woken.
--
-- KEYS[1]  count, KEYS[2] ids that have counted down
-- ARGV[1]  channel, ARGV[2] publish command (PUBLISH or SPUBLISH)
--
-- Returns  1 if the latch was closed, 0 if not
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
local had = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2])
publish(ARGV[2], ARGV[1], WAKE_ALL)
return had
