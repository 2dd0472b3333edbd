-- lib_mutex.lua: the hold and the hand-off of the mutex (Mutex,
-- FairMutex, an Election, LockAll's sets). Not a script by itself: it is
-- put in front of the mutex scripts, after lib.lua and lib_queue.lua.
--
-- The hold. A mutex's lock key is one string, set with its TTL by one
-- SET PX where the lock was free:
--
--   '<token> <fence> <stamp> <count> <seq> <lablen>[v] <label><value>'
--
-- token, the owner's; fence, the hold's fencing token (a decimal string,
-- as the counter gave it); stamp, when it was taken (server ms, read by
-- inspectors); count, the hold count (re-entry); seq, the highest of the
-- hold's sequence numbers that ran (in_order in lib_queue.lua; internal/
-- hold/doc.go, "Late commands"); lablen, the length in bytes of the
-- hold's label (WithLabel; label.lua), which comes next; a 'v' after it
-- says that an Election's leader's value follows the label, to the end.
-- A new hold is 'token fence stamp 1 0 0 ' (internal/protocol/hold.go
-- reads it in Go). A lock kept for a waiter is RESERVED, a space and
-- the waiter's member. Tokens are hex and members have no spaces, so the
-- two never read as each other.
--
-- Why one string cannot hold two owners: it holds one token. Every
-- script writes a new hold only where the key does not exist (an EXISTS
-- or PTTL of -2 in the same script, which nothing interleaves; or a DEL
-- just before, where it was kept for the caller) or over the caller's
-- own hold (a re-entry, a renewal: the token read first is the caller's,
-- and the write keeps it). A release deletes the key only when the token
-- it read is the caller's. So the arguments that a hash with one owner's
-- fields carried (lock.lua, unlock.lua, lib_mutex.lua's hand_on) hold
-- word for word, with 'the hash' read as 'the key'.
--
-- A key of another layout (the hash of a dlock before this one, during a
-- rolling deploy) makes GET fail with WRONGTYPE, and the script with it,
-- before it writes anything: Go names the cause (protocol.LayoutError).
-- SET where the key does not exist never overwrites it, so a Client of
-- either layout grants nothing while one of the other holds the lock.
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
-- grows — whatever the server's clock did (see "Hand-off" in internal/acquisition/doc.go
-- for why that cannot grant twice).
-- Any other (a LockAll set, a fixed lease, replica sync) finds
-- the lock kept for it — the key holds only RESERVED and its member — and
-- takes it with its next attempt. Either way nobody else can take the
-- lock meanwhile, so a waiter is never passed over, and one that died is
-- skipped when its place expires. On a quorum the nodes' queues may
-- disagree on who is first, so there the first waiter is only told.
local RESERVED = '@next'

-- stamp_ms is the server's time in milliseconds as a decimal string: when
-- a hold was taken (in a mutex's hold, or 't:<token>' in an RWMutex's or
-- Semaphore's hash; read by inspectors). It is
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

-- new_hold is a new hold of token with fence f, taken now (stamp, a
-- string of server ms), its label and value, if any, after ('<lablen>[v]
-- <label><value>', as the hold keeps them; '0 ' for neither).
local function new_hold(token, f, stamp, tail)
  return token .. ' ' .. decimal(f) .. ' ' .. stamp .. ' 1 0 ' .. (tail or '0 ')
end

-- split reads a hold (see above): token, fence, stamp, count, seq and
-- the tail ('<lablen>[v] <label><value>'); nothing for a lock kept for a
-- waiter.
local function split(v)
  return string.match(v, '^(%S+) (%d+) (%d+) (%d+) (%d+) (.*)$')
end

-- hold_of reads the lock's hold, when token owns it: fence, stamp, count,
-- seq, tail; nothing if the lock is free, kept, or another owner's.
local function hold_of(lock, token)
  local v = redis.call('GET', lock)
  if not v then
    return nil
  end
  local tok, f, stamp, count, seq, tail = split(v)
  if tok ~= token then
    return nil
  end
  return f, stamp, count, seq, tail
end

-- put writes token's hold back with its expiry unchanged (KEEPTTL).
local function put(lock, token, f, stamp, count, seq, tail)
  redis.call('SET', lock, token .. ' ' .. f .. ' ' .. stamp .. ' ' .. count .. ' ' .. seq .. ' ' .. tail, 'KEEPTTL')
end

-- set_value is a hold's tail with value as its Election leader's value,
-- its label kept.
local function set_value(tail, value)
  local n, rest = string.match(tail, '^(%d+)v? (.*)$')
  return n .. 'v ' .. string.sub(rest, 1, tonumber(n)) .. value
end

-- mutex_count sets token's hold count to n, in the hold's sequence (as
-- set_count in lib_queue.lua does for a hash): a re-entry or an inner
-- unlock. It returns NOT_HELD, STALE, 'run' (set) or 'again' (a copy of
-- the call that set it), and the hold's fence.
local function mutex_count(lock, token, n, seq)
  local f, stamp, _, q, tail = hold_of(lock, token)
  if not f then
    return NOT_HELD
  end
  local s = tonumber(seq)
  if s > tonumber(q) then
    put(lock, token, f, stamp, n, seq, tail)
    return 'run', f
  elseif s == tonumber(q) then
    return 'again', f
  end
  return STALE, f
end

-- hand_on runs when lock has just become free (its key is gone). released
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
    redis.call('SET', lock, new_hold(tok, f, stamp_ms()), 'PX', granted)
    unqueue(queue, alive, h)
    publish(pub, base .. string.match(h, '^[^:]*'),
      h .. ' ' .. decimal(f) .. ' ' .. granted)
    return
  end
  redis.call('SET', lock, RESERVED .. ' ' .. h, 'PX', int(left))
  tell(h, base, pub)
end

-- reserved_for reports whether the free lock is kept for member.
local function reserved_for(lock, member)
  return member ~= '' and redis.call('GET', lock) == RESERVED .. ' ' .. member
end
