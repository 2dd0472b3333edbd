-- lib_rw.lua: helpers shared by the read-write lock's scripts. Not a
-- script by itself: it is put in front of them (after lib.lua and lib_queue.lua).
--
-- The lock is one hash:
--   mode      'read' or 'write' while anyone holds it
--   w:<tok>   the writer's hold count
--   r:<tok>   a reader's hold count (a writer may also read: same token)
--   f:<tok>   the holder's fence
--   t:<tok>   when the holder took it (server ms)
-- and a sorted set 'readers': token -> when that reader's hold expires
-- (server ms), so that each reader expires on its own. The hash's own
-- PEXPIRE covers the longest hold.
--
-- Waiting writers queue in arrival order (lib_queue.lua). Waiting readers
-- are a sorted set 'rqueue': member -> place expiry (server ms), the
-- member ending in ':p' for a reader that prefers readers (it does not
-- wait behind queued writers). Readers are not ordered: when they may go,
-- they all may.

-- forget_reader drops a reader's hold fields.
local function forget_reader(lock, readers, tok)
  redis.call('HDEL', lock, 'r:' .. tok)
  redis.call('ZREM', readers, tok)
  if redis.call('HEXISTS', lock, 'w:' .. tok) == 0 then
    redis.call('HDEL', lock, 'f:' .. tok, 't:' .. tok)
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

-- wake_readers tells the live waiting readers that they may go: all of
-- them, or only those that prefer readers (a writer is next, and the
-- others wait behind it).
local function wake_readers(rqueue, base, pub, only_pref)
  if redis.call('EXISTS', rqueue) == 0 then
    return
  end
  redis.call('ZREMRANGEBYSCORE', rqueue, '-inf', now_ms())
  for _, m in ipairs(redis.call('ZRANGE', rqueue, 0, -1)) do
    if not only_pref or string.sub(m, -2) == ':p' then
      tell(m, base, pub)
    end
  end
end

-- hand_on_rw runs when the writer has left (or, with free set, the lock
-- has become free): the first waiting writer is told if the lock is free,
-- and the readers that may go now are told.
local function hand_on_rw(lock, queue, alive, rqueue, base, pub)
  local mode = redis.call('HGET', lock, 'mode')
  if mode == 'write' then
    return
  end
  local w = first_live(queue, alive)
  if w and not mode then
    tell(w, base, pub)
  end
  wake_readers(rqueue, base, pub, w ~= nil)
end
