-- rw_unlock.lua: release read or write holds of the read-write lock.
--
-- KEYS[1]  (go: Lock) lock hash (see lib_rw.lua)
-- KEYS[2]  (go: Readers) readers: token -> hold expiry (server ms)
-- KEYS[3]  (go: Queue) writers' queue
-- KEYS[4]  (go: Alive) writers' places (see lib_queue.lua)
-- KEYS[5]  (go: RQueue) waiting readers
-- KEYS[6]  (go: RPhase) admitted readers (see lib_rw.lua)
-- ARGV[1]  (go: Token) owner token
-- ARGV[2]  (go: Side) 'r' for a read hold, 'w' for the write hold
-- ARGV[3]  (go: Left) holds to leave: n >= 1 keeps n; 0 releases the hold
-- ARGV[4]  (go: Wake) channel base
-- ARGV[5]  (go: Wake) publish command (PUBLISH or SPUBLISH)
-- ARGV[6]  (go: Seq) n >= 1 only: the call's place in the hold's sequence
--          (in_order in lib_queue.lua): a late inner unlock changes nothing
-- ARGV[7]  (go: ReceiptTTL, if Receipt) n = 0, optional: the hold's lease TTL
--          in milliseconds, with
-- KEYS[7]  (go: Dead, if Receipt) dead (the ledger, lib_queue.lua): the
--          release leaves its receipt there, and a copy of it sent again
--          (go-redis re-sends a call whose reply it lost; the server runs
--          both) that finds the hold gone and the release mark there
--          answers done, not -1. Only this token's own release writes that
--          mark (a burial does not), so done is the truth.
--
-- Returns  1 done, -1 the caller holds nothing, -4 STALE (n >= 1: a later
--          command of the hold ran; nothing changed)
--
-- When the writer leaves while reads taken inside its write hold are
-- still held (each a hold of its own), the lock turns into a read lock
-- (downgrade): in 'write' mode only those reads can be in 'readers'. The last reader's release can only let a writer in:
-- it tells the first queued writer, unless readers admitted by the last
-- writer's release are still to come (the last of them will). A writer's
-- release admits the readers waiting now and tells each; only when there
-- are none does it tell the first queued writer (lib_rw.lua).
local lock, readers, tok, side = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local field = side .. ':' .. tok
if redis.call('HEXISTS', lock, field) == 0 then
  if sent_again(KEYS[7], tok, ARGV[7]) then
    return 1 -- this release, sent again: it ran
  end
  return NOT_HELD
end
if ARGV[7] then
  receipt(KEYS[7], tok, ARGV[7])
end
if tonumber(ARGV[3]) > 0 then
  if set_count(lock, field, tok, ARGV[3], ARGV[6]) == STALE then
    return STALE
  end
  return 1
end
if side == 'r' then
  forget_reader(lock, readers, tok)
  if settle(lock, readers) and not phase_pending(KEYS[6], now_ms()) then
    call_next(KEYS[3], KEYS[4], ARGV[4], ARGV[5])
  end
  return 1
end
redis.call('HDEL', lock, field, 'q:' .. tok)
-- (The label ('l:<tok>', label.lua) goes with the fence: it decides
-- nothing, so deleting it with the rest grants nothing to anyone.)
if redis.call('HEXISTS', lock, 'r:' .. tok) == 0 then
  redis.call('HDEL', lock, 'f:' .. tok, 't:' .. tok, 'l:' .. tok)
end
local now = now_ms()
for _, d in ipairs(redis.call('ZRANGEBYSCORE', readers, '-inf', now)) do
  forget_reader(lock, readers, d)
end
if redis.call('ZCARD', readers) > 0 then
  redis.call('HSET', lock, 'mode', 'read')
else
  redis.call('DEL', lock)
end
hand_on_rw(lock, KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[4], ARGV[5], true)
return 1
