-- lib_mutex.lua: the hand-off of the mutex (Mutex, FairMutex, LockAll's
-- sets). Not a script by itself: it is put in front of the mutex scripts,
-- after lib.lua and lib_queue.lua.
--
-- When a mutex becomes free and waiters are registered, it goes to the
-- first live waiter, for the rest of that waiter's place at most, and that
-- waiter alone is told. A waiter whose member ends in ':h<ttl>' is handed
-- the lock itself — it holds it from then on, with a new fence, and the
-- message '<member> <fence> <ms>' tells it so: it needs no round trip to
-- take it. The fence is the fence counter's value after this hand-off
-- took it; every attempt that leaves the waiter waiting tells it the
-- counter's value then (lock.lua), so the waiter honours the message only
-- if its latest such attempt ran before the hand-off — the counter only
-- grows — whatever the server's clock did (see "Hand-off" in internal/acquire/handoff.go
-- for why that cannot grant twice).
-- Any other (a LockAll set, a fixed lease, replica sync) finds
-- the lock kept for it — the hash holds only RESERVED = its member — and
-- takes it with its next attempt. Either way nobody else can take the
-- lock meanwhile, so a waiter is never passed over, and one that died is
-- skipped when its place expires. On a quorum the nodes' queues may
-- disagree on who is first, so there the first waiter is only told.
local RESERVED = '@next'

-- stamp_ms is the server's time in milliseconds as a decimal string: when
-- a hold was taken ('t:<token>' in a lock hash, read by inspectors). It is
-- made from TIME's strings ('<seconds>', '<micros>' unpadded): cheaper
-- than now_ms's numbers (lib_queue.lua) printed back into a string.
-- lock.lua's common case writes the same out.
local function stamp_ms()
  local s, us = clock()
  return s .. string.sub('00000' .. us, -6, -4)
end

-- token_of is the owner token in a member.
local function token_of(member)
  return string.match(member, '^[^:]*:([^:]*)')
end

-- decimal is a fence as a decimal string (a Lua number would print with
-- only 14 significant digits).
local function decimal(f)
  if type(f) == 'string' then
    return f
  end
  return int(f)
end

-- hand_on runs when lock has just become free (its hash is gone). released
-- is the token of the hold that ended, if any: a place of its own in the
-- queue is stale (left by a call that go-redis sent again after losing its
-- reply, which then took the lock) and is dropped. first, if given, is
-- the head of the queue as the caller has just read it (first_live).
local function hand_on(lock, fence, queue, alive, base, pub, reserve, released, first)
  local h, now, exp = first_live(queue, alive, first)
  while h and token_of(h) == released do
    unqueue(queue, alive, h)
    h, now, exp = first_live(queue, alive)
  end
  if not h then
    return
  end
  if not reserve then
    tell(h, base, pub)
    return
  end
  local left = math.max(exp - now, 1)
  local ttl = string.match(h, ':h(%d+)$')
  if ttl then
    local granted = int(math.min(tonumber(ttl), left))
    local tok = token_of(h)
    local f = next_fence(fence)
    -- stamp_ms is now (first_live's), as a string
    redis.call('HSET', lock, tok, 1, 't:' .. tok, stamp_ms(), 'f:' .. tok, f)
    redis.call('PEXPIRE', lock, granted)
    unqueue(queue, alive, h)
    publish(pub, base .. string.match(h, '^[^:]*'),
      h .. ' ' .. decimal(f) .. ' ' .. granted)
    return
  end
  redis.call('HSET', lock, RESERVED, h)
  redis.call('PEXPIRE', lock, left)
  tell(h, base, pub)
end

-- reserved_for reports whether the free lock is kept for member.
local function reserved_for(lock, member)
  return member ~= '' and redis.call('HGET', lock, RESERVED) == member
end
