-- lib_rw.lua: helpers shared by the read-write lock's scripts. Not a
-- script by itself: it is put in front of them (after lib.lua and lib_queue.lua).
--
-- The lock is one hash:
--   mode      'read' or 'write' while anyone holds it
--   w:<tok>   the writer's hold count
--   r:<tok>   a reader's hold count (a read inside a write hold has a
--             token and a fence of its own)
--   f:<tok>   the holder's fence
--   t:<tok>   when the holder took it (server ms)
--   l:<tok>   the holder's label (WithLabel; label.lua), deleted with f:
--   q:<tok>   the highest command of the hold's sequence that ran
--             (in_order in lib_queue.lua)
-- and a sorted set 'readers': token -> when that reader's hold expires
-- (server ms), so that each reader expires on its own. The hash's own
-- PEXPIRE covers the longest hold.
--
-- Waiting writers queue in arrival order (lib_queue.lua). Waiting readers
-- are a sorted set 'rqueue': member -> place expiry (server ms), the
-- member ending in ':p' for a reader that prefers readers (it does not
-- wait behind queued writers). Readers are not ordered: when they may go,
-- they all may.
--
-- The lock is phase-fair. When a writer lets go (release, downgrade, an
-- unlock --force), the readers waiting at that moment are admitted: moved
-- from 'rqueue' to the sorted set 'rphase' (member -> the same place
-- expiry) and told. An admitted reader may take its hold although writers
-- wait; no writer is granted while 'rphase' has a live member. A member
-- leaves 'rphase' when it takes its hold, gives up its wait, or its place
-- expires; the next writer is told by the release or leave that finds
-- the lock free and no admitted reader left to come. A writer that
-- arrives while readers hold stops new readers (they wait in 'rqueue'
-- for the phase after it).
--
-- Why this never grants a writer beside a reader, or two writers: a
-- write hold is granted only when 'mode' is unset (no read or write hold
-- at all: the hash is deleted with its last holder), and it sets 'mode'
-- to 'write' in the same script; a read hold is granted only when 'mode'
-- is not 'write' (or to the writer itself, reading inside its own hold).
-- Scripts run one at a time, so both tests see every earlier grant.
-- Admission only decides who is told and who may go first among those
-- the mode test lets through: it never grants anything by itself.
--
-- Why neither side waits more than about two phases: a reader that
-- arrives while a writer holds waits in 'rqueue' and is admitted by that
-- writer's release; one that arrives while a writer waits for the lock
-- waits for that writer's hold, then is admitted by its release. Either
-- way at most one write hold begins during its wait. A writer at the
-- head of the queue waits for the readers holding when it came and, if a
-- writer's release admitted readers just before, for those; new readers
-- stay out (they are neither admitted nor may pass a waiting writer).
-- With k writers ahead of it, it waits k write holds and at most k + 1
-- read phases (one after each write hold ahead, and the one it found).
-- An admitted reader that never comes holds the writers up at most until
-- its place expires (WithQueueTTL), as a dead writer in the queue does.

-- forget_reader drops a reader's hold fields.
-- The label ('l:<tok>', label.lua) goes with the fence: it decides
-- nothing, so deleting it with the rest grants nothing to anyone.
local function forget_reader(lock, readers, tok)
  redis.call('HDEL', lock, 'r:' .. tok, 'q:' .. tok)
  redis.call('ZREM', readers, tok)
  if redis.call('HEXISTS', lock, 'w:' .. tok) == 0 then
    redis.call('HDEL', lock, 'f:' .. tok, 't:' .. tok, 'l:' .. tok)
  end
end

-- settle frees the lock when its last holder is gone; it returns true if
-- it did.
local function settle(lock, readers)
  if redis.call('HGET', lock, 'mode') == 'read' and redis.call('ZCARD', readers) == 0 then
    redis.call('DEL', lock)
    return true
  end
  return false
end

-- expire_readers drops the readers whose hold has expired (crashed or cut
-- off), freeing the lock if they were the last.
local function expire_readers(lock, readers, now)
  local dead = redis.call('ZRANGEBYSCORE', readers, '-inf', now)
  for _, d in ipairs(dead) do
    forget_reader(lock, readers, d)
  end
  if #dead > 0 then
    settle(lock, readers)
  end
end

-- reader_wait is how long until the first reader's hold expires, in ms.
local function reader_wait(readers, now)
  local first = redis.call('ZRANGE', readers, 0, 0, 'WITHSCORES')
  if first[2] then
    return math.max(tonumber(first[2]) - now, 0)
  end
  return 0
end

-- phase_pending returns when the first place of the admitted readers
-- still to come expires (server ms), or nil when none is left; expired
-- places are dropped. One call when no phase is open.
local function phase_pending(rphase, now)
  if redis.call('EXISTS', rphase) == 0 then
    return nil
  end
  redis.call('ZREMRANGEBYSCORE', rphase, '-inf', now)
  local first = redis.call('ZRANGE', rphase, 0, 0, 'WITHSCORES')
  if first[2] then
    return tonumber(first[2])
  end
  return nil
end

-- admit_readers opens a read phase: the live waiting readers move from
-- rqueue to rphase, keeping their place expiry, and each is told. It
-- returns how many were admitted.
local function admit_readers(rqueue, rphase, base, pub)
  if redis.call('EXISTS', rqueue) == 0 then
    return 0
  end
  redis.call('ZREMRANGEBYSCORE', rqueue, '-inf', now_ms())
  local waiting = redis.call('ZRANGE', rqueue, 0, -1)
  if #waiting == 0 then
    return 0
  end
  -- rqueue lives as long as its newest place (stretch); so does rphase
  local keep = math.max(redis.call('PTTL', rqueue), redis.call('PTTL', rphase))
  redis.call('ZUNIONSTORE', rphase, 2, rphase, rqueue, 'AGGREGATE', 'MAX')
  redis.call('PEXPIRE', rphase, keep)
  redis.call('DEL', rqueue)
  for _, m in ipairs(waiting) do
    tell(m, base, pub)
  end
  return #waiting
end

-- hand_on_rw runs when a writer has let go of the lock (released, with
-- released set) or given up its wait: unless a writer holds, the waiting
-- readers are admitted (after a release always; after a leave when no
-- writer waits any more), and the first waiting writer is told if the
-- lock is free and no admitted reader is left to come.
local function hand_on_rw(lock, queue, alive, rqueue, rphase, base, pub, released)
  local mode = redis.call('HGET', lock, 'mode')
  if mode == 'write' then
    return
  end
  local w = first_live(queue, alive)
  if released or not w then
    admit_readers(rqueue, rphase, base, pub)
  end
  if w and not mode and not phase_pending(rphase, now_ms()) then
    tell(w, base, pub)
  end
end
