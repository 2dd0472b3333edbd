-- elect.lua: record the value of an Election's leader (when a release
-- handed its Campaign the lock: a Campaign whose own attempt won had
-- lock.lua record it; and at each Proclaim), and tell the election's
-- observers.
--
-- KEYS[1]  (go: Lock) the election's lock: the leader's hold, one string
--          (lib_mutex.lua), whose fence is the leader's term and which
--          ends with its value
-- ARGV[1]  (go: Token) owner token
-- ARGV[2]  (go: Value) value
-- ARGV[3]  (go: Observers) the observers' channel
-- ARGV[4]  (go: Publish) publish command (PUBLISH or
--          SPUBLISH)
-- ARGV[5]  (go: Seq) the call's place in the hold's sequence (in_order in
--          lib_queue.lua; internal/hold/doc.go, "Late commands")
--
-- Returns  {1, term}  recorded (or this very call ran already)
--          {-1}        the caller does not lead (its lease was lost)
--          {-4}        STALE: a later command of the leadership ran
--                      first (a later Proclaim, or a renewal after it):
--                      nothing changed
--          (when the publish was refused, the reply comes wrapped as
--          {REFUSED, error, reply}: see publish in lib.lua; Go unwraps it)
--
-- Why a value is never recorded for another leader: the value is part of
-- the caller's own hold, written only while that token holds the lock
-- (hold_of in this same script), and it goes with the hold (a release, an
-- expiry or a force deletes the key).
--
-- Why a late Proclaim never overwrites a later one: every Proclaim of a
-- leadership carries a place in its hold's sequence, above every command
-- of the hold sent before it; the value is written only by a call whose
-- place is above the highest that ran. A Proclaim given up on and
-- delivered after a later one (or after any later command of the hold)
-- is refused. A copy of the call that ran (go-redis sends a call again
-- when it lost its reply) changes nothing and answers recorded.
local f, stamp, count, q, tail = hold_of(KEYS[1], ARGV[1])
if not f then
  return {NOT_HELD}
end
local seq = tonumber(ARGV[5])
if seq < tonumber(q) then
  return {STALE}
elseif seq > tonumber(q) then
  put(KEYS[1], ARGV[1], f, stamp, count, ARGV[5], set_value(tail, ARGV[2]))
  publish(ARGV[4], ARGV[3], WAKE_ALL)
end
return {HELD, f}
