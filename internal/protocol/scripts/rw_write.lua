-- rw_write.lua: take or re-enter the write hold of the read-write lock,
-- or keep a place in the writers' queue.
--
-- KEYS[1]  (go: Lock) lock hash (see lib_rw.lua)
-- KEYS[2]  (go: Fence) fence counter (never expires)
-- KEYS[3]  (go: Readers) readers: token -> hold expiry (server ms)
-- KEYS[4]  (go: Queue) writers' queue: member -> arrival number
--          (lib_queue.lua: server µs, but above every earlier waiter's
--          whatever the clock did)
-- KEYS[5]  (go: Alive) writers' places: member -> place expiry (server ms)
-- KEYS[6]  (go: RQueue) waiting readers (unused here: the keys are
--          rw_read.lua's)
-- KEYS[7]  (go: RPhase) admitted readers (a read phase): member -> place
--          expiry (server ms)
-- KEYS[8]  (go: Dead) dead: tokens whose acquire was given up on (bury.lua)
-- ARGV[1]  (go: Token) owner token
-- ARGV[2]  (go: TTL) lease TTL in milliseconds
-- ARGV[3]  (go: Count) 0 to acquire; n >= 2 to re-enter, setting the hold
--          count to n
-- ARGV[4]  (go: Member) the waiter's member ('<client id>:<token>'); '' for
--          none
-- ARGV[5]  (go: PlaceTTL) place TTL in milliseconds; 0 for TryLock (take no
--          place)
-- ARGV[6]  (go: Wake) channel base
-- ARGV[7]  (go: Wake) publish command (PUBLISH or SPUBLISH)
-- ARGV[8]  (go: Seq, if Reentry) re-entry only: its place in the hold's
--          sequence (in_order in lib_queue.lua)
--
-- The write hold is granted only on a free lock (no 'mode'), to the first
-- live writer in the queue (or to any when none waits), and only when no
-- reader admitted by the last writer's release is still to come
-- (lib_rw.lua).
--
-- Returns  {1, fence}  held (idempotent: a retried acquire answers the same)
--          {0, wait}   not now: try again within wait ms at the latest
--          {-1}        re-entry asked for, but the caller holds nothing;
--                      or an attempt of an acquire given up on (bury.lua)
--          {-4}        STALE: a re-entry older than a command of the hold
--                      that ran; nothing changed
local lock, fence, readers, queue, alive, rphase = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[7]
local tok, ttl, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
local member, place_ttl = ARGV[4], tonumber(ARGV[5])
local w = 'w:' .. tok
if redis.call('ZSCORE', KEYS[8], ARGV[1]) then
  return {NOT_HELD} -- a late attempt of an acquire given up on
end
local now = now_ms()
expire_readers(lock, readers, now)

if count > 0 then
  local res = set_count(lock, w, tok, count, ARGV[8])
  if res == NOT_HELD or res == STALE then
    return {res}
  elseif res == 'run' then
    stretch(lock, ttl)
  end
  return {HELD, redis.call('HGET', lock, 'f:' .. tok)}
end
if redis.call('HEXISTS', lock, w) == 1 then
  stretch(lock, ttl)
  unqueue(queue, alive, member)
  return {HELD, redis.call('HGET', lock, 'f:' .. tok)}
end

local dropped = purge(queue, alive, now)
local first = head(queue)
local mode = redis.call('HGET', lock, 'mode')
local pending = phase_pending(rphase, now) -- admitted readers still to come
if not mode and not pending then
  if first == nil or first == member then
    local f = next_fence(fence)
    redis.call('HSET', lock, 'mode', 'write', w, 1, 'f:' .. tok, f, 't:' .. tok, now)
    redis.call('PEXPIRE', lock, ttl)
    unqueue(queue, alive, member)
    return {HELD, f}
  end
  if dropped > 0 then
    -- the writers ahead of first died: tell it its turn has come
    tell(first, ARGV[6], ARGV[7])
  end
end

if place_ttl == 0 then
  return {BUSY, math.max(redis.call('PTTL', lock), 0)}
end
place(queue, alive, member, now, place_ttl)
local wait
if mode == 'write' then
  wait = math.max(redis.call('PTTL', lock), 0)
elseif mode == 'read' then
  wait = reader_wait(readers, now)
  if pending then
    wait = math.min(wait, pending - now)
  end
elseif pending then
  wait = pending - now
else
  wait = tonumber(redis.call('ZSCORE', alive, first)) - now
end
return {BUSY, wait}
