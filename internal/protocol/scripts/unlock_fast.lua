-- unlock_fast.lua: the final release of a mutex hold (a Mutex's, a
-- FairMutex's, an Election's leader's Resign) that nobody waits for:
-- what unlock.lua does then, with only the keys and arguments it reads. When somebody waits it changes nothing and
-- answers SLOW, and Go runs unlock.lua in its place, which hands the lock
-- on (internal/protocol/doc.go, "Fast scripts").
--
-- KEYS[1]  (go: Lock) lock: the hold, one string (lib_mutex.lua)
-- KEYS[2]  (go: Fence) the fence counter of the lock's slot
-- KEYS[3]  (go: Queue) queue: waiters
-- KEYS[4]  (go: Dead) dead: a release that handed the lock on left its
--          release mark there, 'rel:<token>' (unlock.lua's receipt)
-- ARGV[1]  (go: Token) owner token
-- ARGV[2]  (go: Fence) the hold's fence
-- ARGV[3]  (go: Observers, if Election) an Election's leader resigning:
--          its observers' channel, told
-- ARGV[4]  (go: Publish, if Election) publish command (PUBLISH or SPUBLISH)
-- ARGV[5]  (go: ReceiptTTL, if Election) the receipt's TTL in milliseconds
--
-- Returns  1     done
--          -1    the caller holds nothing: its lease was lost, or never held
--          SLOW  waiters are registered: nothing changed
--
-- Why this frees only what unlock.lua would: with no queue, unlock.lua's
-- final release (Left 0) runs this GET and DEL, then the same answer when
-- the hold was not the caller's ("Sent again" in unlock.lua), else done — for a mutex
-- nothing more; for an Election's leader (observers given) its slow path,
-- which with nobody waiting comes to the receipt and the observers told,
-- as here. This script runs that word for word after the EXISTS that
-- found no queue, in one script, which nothing interleaves. unlock.lua's
-- argument (the key holds one hold, so the caller's token read there
-- means the caller held the lock, and DEL frees it) holds for it
-- unchanged; the hold's label and value are part of the string.
if redis.call('EXISTS', KEYS[3]) == 1 then
  return SLOW
end
local token = ARGV[1]
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 1, #token + 1) ~= token .. ' ' then
  if redis.call('GET', KEYS[2]) == ARGV[2] or redis.call('ZSCORE', KEYS[4], 'rel:' .. token) then
    return 1 -- this release, sent again: it ran
  end
  return NOT_HELD
end
redis.call('DEL', KEYS[1])
if not ARGV[3] then
  return 1
end
-- @helpers
-- an Election's leader resigned: the receipt (a copy of this release
-- answers done, whoever leads by then), then its observers told
receipt(KEYS[4], token, ARGV[5])
publish(ARGV[4], ARGV[3], WAKE_ALL)
return 1
