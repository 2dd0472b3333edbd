-- latch_open.lua: open a latch whatever its count (unlock --force); its
-- waiters are woken. The calls its phase remembers are kept (they expire
-- with the latch's TTL): a late copy of a call of this phase still finds
-- them and changes nothing (see latch_down.lua).
--
-- KEYS[1]  count, KEYS[2] the ids set of an older dlock's CountDownOnce
-- ARGV[1]  channel, ARGV[2] publish command (PUBLISH or SPUBLISH)
--
-- Returns  1 if the latch was closed, 0 if not
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
local had = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2])
publish(ARGV[2], ARGV[1], WAKE_ALL)
return had
