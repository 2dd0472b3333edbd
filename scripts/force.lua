-- force.lua: free a mutex whoever holds it (an operator's unlock --force);
-- the next waiter gets it as from a release. Its holder learns of the loss
-- at its next renewal.
--
-- KEYS[1]  lock hash, KEYS[2] fence counter, KEYS[3] queue, KEYS[4] alive
-- ARGV[1]  channel base, ARGV[2] publish command (PUBLISH or SPUBLISH)
-- ARGV[3]  an Election's observers' channel, told 'all' (absent for a mutex)
--
-- Returns  1 if there was a lock to free, 0 if not
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
local had = redis.call('DEL', KEYS[1])
hand_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], true)
if ARGV[3] then
  publish(ARGV[2], ARGV[3], WAKE_ALL)
end
return had
