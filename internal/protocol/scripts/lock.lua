-- lock.lua: acquire the reentrant mutex (Mutex or FairMutex), or re-enter a
-- hold of it, or keep a waiter's place in its queue.
--
-- KEYS[1]  (go: Lock) lock: the hold, one string (lib_mutex.lua: owner
--          token, fence, when taken, hold count, sequence, label, value);
--          or RESERVED and the waiter it is kept for
-- KEYS[2]  (go: Fence) the fence counter of the lock's slot (INCR'd on first
--          entry only, see next_fence in lib_queue.lua; read when the caller
--          waits: the reply's seen)
-- KEYS[3]  (go: Queue) queue: member -> arrival number (lib_queue.lua: server
--          µs, but above every earlier waiter's whatever the clock did)
-- KEYS[4]  (go: Alive) alive: member -> place expiry (server ms)
-- KEYS[5]  (go: Dead) dead: tokens whose acquire was given up on (bury.lua)
-- ARGV[1]  (go: Token) owner token
-- ARGV[2]  (go: TTL) lease TTL in milliseconds
-- ARGV[3]  (go: Count) 0 to acquire; n >= 2 to re-enter, setting the hold
--          count to n
-- ARGV[4]  (go: Member) the waiter's member ('<client id>:<token>[:h<lease
--          ttl>]', see lib_mutex.lua); '' to take no place
-- ARGV[5]  (go: PlaceTTL) place TTL in milliseconds; 0 to take no place
--          (TryLock)
-- ARGV[6]  (go: Fair) '1' for a FairMutex: a free lock goes to the first waiter
-- ARGV[7]  (go: Wake) channel base
-- ARGV[8]  (go: Wake) publish command (PUBLISH or SPUBLISH)
-- ARGV[9]  (go: Queued) '1' if an earlier attempt of this acquire carried its
--          member (it may have a place to give up when it takes the lock)
-- ARGV[10] (go: Seq, if Reentry|Campaign|Labelled) re-entry only: its place in the
--          hold's sequence (in_order in lib_queue.lua; internal/hold/hold.go, "Late
--          commands"); '' otherwise
-- ARGV[11] (go: Tail, if Campaign|Labelled) the hold's tail as Go made it
--          (protocol.HoldTail: '<lablen>[v] <label><value>'): a hold's
--          label (WithLabel), and an Election's Campaign's value,
--          recorded when this call grants it the lock
-- ARGV[12] (go: Observers, if Campaign) an Election's Campaign only: the
--          observers' channel, told then.
--          A Campaign that is handed the lock by a release records its
--          value itself (elect.lua), and a labelled hold its label
--          (label.lua): the release knows neither. As in elect.lua, the
--          tail is written only into the caller's own hold, where this
--          call has just found or made that token the lock's holder:
--          never another's.
--
-- Returns  {1, fence}  held; fence is the hold's fencing token
--          {0, wait}   held by another owner (or kept for another waiter):
--                      try again within wait ms at the latest
--          {0, wait, seen}  the same, and the caller has a place in the
--                      queue; seen is the fence counter's value (0 if it
--                      has none yet) as this call found it: a hand-off to
--                      the caller with a fence above seen came after this
--                      call ran (lib_mutex.lua; internal/acquisition/handoff.go)
--          {-1}        re-entry asked for, but the caller holds nothing;
--                      or an attempt of an acquire given up on (bury.lua)
--          {-4}        STALE: a re-entry older than a command of the hold
--                      that ran; nothing changed
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
--
-- Idempotent: go-redis retries a call whose reply was lost, so a call that
-- had already been applied answers the same when it runs again (the token
-- already holds the lock; the count is set, not added to). A tail is
-- written over a hold's only where it has none yet ('0 ': a hand-off's):
-- a copy that arrives after a Proclaim, or after label.lua, does not undo
-- them.
local lock, fence, queue, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, member = ARGV[1], ARGV[2], ARGV[4]

-- This script runs when the fast one (lock_fast.lua) gave way, or the
-- Client's hint says it would: mostly on a lock that is held. So one
-- PTTL asks first whether the lock is free (no such key) and, when it is
-- not, how long the caller may have to wait (the reply's wait); only a
-- free lock asks the common case's other questions, in one EXISTS: no
-- acquire given up on was buried here (the dead set is gone, so this
-- token is not in it), and, for a FairMutex, nobody waits. When it
-- counts a key they are asked one by one below. (A redis.call costs the
-- server more than the command it runs.)
local common = false
local free = false -- the lock is free
local pttl -- the lock's PTTL as an acquire found it: -2, there is no lock
if ARGV[3] == '0' then
  pttl = redis.call('PTTL', lock)
  free = pttl == -2
  if free then
    if ARGV[6] == '1' then
      common = redis.call('EXISTS', KEYS[5], queue) == 0
    else
      common = redis.call('EXISTS', KEYS[5]) == 0
    end
  end
end
if not common then
  if redis.call('ZSCORE', KEYS[5], token) then
    return {NOT_HELD} -- a late attempt of an acquire given up on
  end
  common = free and (ARGV[6] ~= '1' or redis.call('EXISTS', queue) == 0)
end

-- The common case, before the helpers: a free lock that nobody waits for
-- (a Mutex takes a free lock whoever waits, unless it is kept for one).
-- It is written out, not shared with take below: a function defined here
-- would be made at every call, and the helpers (behind it) are not made
-- yet. Numbers are kept as the strings they come as: converting one
-- (tonumber, or a number given to redis.call) costs more than the
-- comparison it serves. (Go sends the count as a decimal integer, so '0'
-- is the only way it says 0.)
--
-- Why this cannot grant twice: the lock key is written only when it does
-- not exist (a PTTL that found no such key, in this same script, which
-- nothing interleaves), and every hold,
-- and a lock kept for a waiter, lives in that key (one string: lib_mutex.lua). A FairMutex also
-- requires an empty queue, as the path below would. A buried token takes nothing: the dead set exists
-- while it holds one, so common is then decided after the ZSCORE above.
if common then
  -- the hold's fence (next_fence in lib_queue.lua)
  -- (read back as the counter's string from 10^14 on: .. prints a
  -- number of 15 digits or more inexactly, and 2^53 is not far)
  local f = redis.call('INCR', fence)
  if f >= 100000000000000 then
    f = redis.call('GET', fence)
  end
  -- when it was taken, in server ms (stamp_ms in lib_mutex.lua); the
  -- hold as new_hold in lib_mutex.lua writes it, with an Election's new
  -- leader's value (take below, written out here)
  local t = redis.call('TIME')
  redis.call('SET', lock, token .. ' ' .. f .. ' ' .. t[1] .. string.sub('00000' .. t[2], -6, -4) .. ' 1 0 ' .. (ARGV[11] or '0 '), 'PX', ttl)
  -- A first attempt has no place to give up (a call that go-redis sent
  -- again after losing its reply may have left one: the release skips
  -- it); a later one gives up its place (dequeue in lib_queue.lua).
  if ARGV[9] == '1' and member ~= '' and redis.call('ZREM', queue, member) == 1 then
    redis.call('ZREM', alive, member)
  end
  if ARGV[12] then
    publish(ARGV[8], ARGV[12], WAKE_ALL)
  end
  return {HELD, f}
end
-- @helpers
local count, place_ttl = tonumber(ARGV[3]), tonumber(ARGV[5])

-- recorded writes the caller's tail (its label; a Campaign's value) into
-- its hold (f, stamp, count, seq, tail: split's) where the hold has none
-- yet (it was handed the lock: a hand-off writes none), and tells an
-- Election's observers then; a copy of the call that wrote it, or one
-- after a Proclaim or label.lua, finds one and changes nothing.
local function recorded(f, stamp, count, seq, tail)
  if ARGV[11] and tail == '0 ' then
    put(lock, token, f, stamp, count, seq, ARGV[11])
    if ARGV[12] then
      publish(ARGV[8], ARGV[12], WAKE_ALL)
    end
  end
end

-- take acquires the free lock; queued: the caller may have a place to
-- give up.
local function take(queued)
  local f = next_fence(fence)
  -- the caller's tail: its label, an Election's new leader's value
  redis.call('SET', lock, new_hold(token, f, stamp_ms(), ARGV[11]), 'PX', ttl)
  if queued then
    dequeue(queue, alive, member)
  end
  if ARGV[12] then
    publish(ARGV[8], ARGV[12], WAKE_ALL)
  end
  return {HELD, f}
end

if count > 0 then
  -- A re-entry that arrives late (after a later command of its hold, say
  -- an Extend) changes nothing; on time, it renews as the watchdog does,
  -- never shortening the lease.
  local r, f = mutex_count(lock, token, ARGV[3], ARGV[10])
  if r == NOT_HELD or r == STALE then
    return {r}
  elseif r == 'run' then
    stretch(lock, ttl)
  end
  return {HELD, f}
end

if free then
  -- a FairMutex's, and waiters are registered
  local h = first_live(queue, alive)
  if h == nil or h == member then
    return take(true)
  end
  -- free, but another waiter is first (the one told before gave up or
  -- died): hand it the lock (or keep it for it) and tell it
  hand_on(lock, fence, queue, alive, ARGV[7], ARGV[8], true)
else
  local v = redis.call('GET', lock)
  local tok, f, stamp, n, seq, tail = split(v)
  if tok == token then
    -- our own earlier call, retried after its reply was lost; or the lock
    -- was handed to us and the message has not come (yet). It only
    -- lengthens: a late copy must not shorten what an Extend set.
    recorded(f, stamp, n, seq, tail)
    stretch(lock, ttl)
    dequeue(queue, alive, member)
    return {HELD, f}
  elseif member ~= '' and v == RESERVED .. ' ' .. member then
    -- kept for us
    redis.call('DEL', lock)
    return take(true)
  end
end

-- The wait is the PTTL asked above, unless this call has changed the lock
-- since (hand_on, when it found it free).
local wait = pttl
if free or not wait then
  wait = redis.call('PTTL', lock)
end
wait = math.max(wait, 0)
if place_ttl > 0 then
  place(queue, alive, member, now_ms(), place_ttl, ARGV[9] ~= '1')
  return {BUSY, wait, redis.call('GET', fence) or 0}
end
return {BUSY, wait}
