-- lib_mutex.lua: the hand-off of the mutex (Mutex, FairMutex, LockAll's
-- sets). Not a script by itself: it is put in front of the mutex scripts,
-- after lib.lua and lib_queue.lua.
--
-- When a mutex becomes free and waiters are registered, the lock is kept
-- for the first live waiter — the hash holds only RESERVED = its member,
-- for as long as that waiter's place lives — and that waiter alone is
-- told. Nobody else can take the lock meanwhile, so a waiter is never
-- passed over; one that died is skipped when its place expires. On a
-- quorum the nodes' queues may disagree on who is first, so there the
-- first waiter is told but nothing is kept for it.
local RESERVED = '@next'

-- hand_on runs when lock has just become free (its hash is gone).
local function hand_on(lock, queue, alive, base, pub, reserve)
  local h, now = first_live(queue, alive)
  if not h then
    return
  end
  if reserve then
    local left = tonumber(redis.call('ZSCORE', alive, h)) - now
    redis.call('HSET', lock, RESERVED, h)
    redis.call('PEXPIRE', lock, math.max(left, 1))
  end
  tell(h, base, pub)
end

-- reserved_for reports whether the free lock is kept for member.
local function reserved_for(lock, member)
  return member ~= '' and redis.call('HGET', lock, RESERVED) == member
end

-- dequeue removes member from the queue if it is there (one call if not).
local function dequeue(queue, alive, member)
  if member ~= '' and redis.call('ZREM', queue, member) == 1 then
    redis.call('ZREM', alive, member)
  end
end
