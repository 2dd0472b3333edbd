-- elect.lua: record the value of an Election's leader (when a release
-- handed its Campaign the lock: a Campaign whose own attempt won had
-- lock.lua record it; and at each Proclaim), and tell the election's
-- observers.
--
-- KEYS[1]  (go: Lock) the election's lock hash: owner token -> hold count,
--          't:<token>' -> when taken (server ms), 'f:<token>' -> its
--          fence (the leader's term), 'v:<token>' -> value
-- ARGV[1]  (go: Token) owner token
-- ARGV[2]  (go: Value) value
-- ARGV[3]  (go: Observers) the observers' channel
-- ARGV[4]  (go: Publish) publish command (PUBLISH or
--          SPUBLISH)
-- ARGV[5]  (go: Seq) the call's place in the hold's sequence (in_order in
--          lib_queue.lua; internal/hold/hold.go, "Late commands")
--
-- Returns  {1, term}  recorded (or this very call ran already)
--          {-1}        the caller does not lead (its lease was lost)
--          {-4}        STALE: a later command of the leadership ran
--                      first (a later Proclaim, or a renewal after it):
--                      nothing changed
--          (when the publish was refused, the reply comes wrapped as
--          {REFUSED, error, reply}: see publish in lib.lua; Go unwraps it)
--
-- Why a value is never recorded for another leader: the value is a field
-- of the caller's own token, written only while that token holds the lock
-- (HEXISTS in this same script), and it goes with the hold (unlock.lua
-- deletes it, an expiry or a force deletes the whole hash).
--
-- Why a late Proclaim never overwrites a later one: every Proclaim of a
-- leadership carries a place in its hold's sequence, above every command
-- of the hold sent before it; the value is written only by a call whose
-- place is above the highest that ran. A Proclaim given up on and
-- delivered after a later one (or after any later command of the hold)
-- is refused. A copy of the call that ran (go-redis sends a call again
-- when it lost its reply) changes nothing and answers recorded.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return {NOT_HELD}
end
-- @helpers
local order = in_order(KEYS[1], ARGV[1], ARGV[5])
if order == 'stale' then
  return {STALE}
elseif order == 'run' then
  redis.call('HSET', KEYS[1], 'v:' .. ARGV[1], ARGV[2])
  publish(ARGV[4], ARGV[3], WAKE_ALL)
end
return {HELD, redis.call('HGET', KEYS[1], 'f:' .. ARGV[1])}
