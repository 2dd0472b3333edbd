-- elect.lua: record the value of an Election's leader (when its Campaign
-- has won, and at each Proclaim), and tell the election's observers.
--
-- KEYS[1]  the election's lock hash: owner token -> hold count,
--          't:<token>' -> when taken (server ms), 'v:<token>' -> value
-- KEYS[2]  fence counter: the leader's term
-- ARGV[1]  owner token
-- ARGV[2]  value
-- ARGV[3]  the observers' channel, ARGV[4] publish command (PUBLISH or
--          SPUBLISH)
--
-- Returns  {1, term}  recorded
--          {-1}        the caller does not lead (its lease was lost)
--          (when the publish was refused, the reply comes wrapped as
--          {REFUSED, error, reply}: see publish in lib.lua; Go unwraps it)
--
-- Why a value is never recorded for another leader: the value is a field
-- of the caller's own token, written only while that token holds the lock
-- (HEXISTS in this same script), and it goes with the hold (unlock.lua
-- deletes it, an expiry or a force deletes the whole hash). Idempotent: a
-- call sent again after its reply was lost sets the same value.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return {NOT_HELD}
end
redis.call('HSET', KEYS[1], 'v:' .. ARGV[1], ARGV[2])
publish(ARGV[4], ARGV[3], WAKE_ALL)
local term = redis.call('GET', KEYS[2]) or '0'
return {HELD, term}
