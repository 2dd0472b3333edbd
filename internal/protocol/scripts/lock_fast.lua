-- lock_fast.lua: a first attempt to acquire a free mutex (a Mutex, a
-- FairMutex, an Election's Campaign) that nobody waits for: where
-- lock.lua would take the lock, with only the keys and arguments it
-- reads there. Elsewhere it changes nothing and answers SLOW, and Go runs
-- lock.lua in its place (internal/protocol/doc.go, "Fast scripts").
--
-- KEYS[1]  (go: Lock) lock: the hold, one string (lib_mutex.lua)
-- KEYS[2]  (go: Fence) the fence counter of the lock's slot
-- KEYS[3]  (go: Dead) dead: tokens of acquires given up on (bury.lua),
--          and receipts of releases (unlock.lua)
-- KEYS[4]  (go: Queue, if Fair) a FairMutex's queue: it takes the lock only
--          when nobody waits
-- ARGV[1]  (go: Token) owner token
-- ARGV[2]  (go: TTL) lease TTL in milliseconds
-- ARGV[3]  (go: Stamp) when the attempt was made, the Client's clock in
--          ms: kept as when the hold was taken (lib_mutex.lua), where
--          lock.lua asks the server's TIME (some 10 000 of the server's
--          instructions, a tenth of an uncontended pair's: bench/README)
-- ARGV[4]  (go: Tail, if Campaign|Labelled) the hold's tail as Go made it
--          (lock.lua's ARGV[11]): its label, a Campaign's value
-- ARGV[5]  (go: Observers, if Campaign) the observers' channel, told then
-- ARGV[6]  (go: Publish, if Campaign) publish command (PUBLISH or SPUBLISH)
--
-- Returns  {1, fence}  held; fence is the hold's fencing token
--          SLOW        the lock exists (held, or kept for a waiter), the
--                      caller's token was buried here, or (FairMutex)
--                      somebody waits: nothing changed
--
-- Why this grants only what lock.lua would: it takes the lock exactly
-- where lock.lua's first attempt (count 0, no place to give up) takes
-- it, and writes what lock.lua writes there, word for word: where one
-- EXISTS over the lock, the dead set and, for a FairMutex (an Election
-- is one), the queue counts none of them (lock.lua's common case); or,
-- when that counted one, where the caller's token is not in the dead set
-- (ZSCORE), the lock does not exist and, for a FairMutex, nobody waits
-- (lock.lua's other path to take, which asks PTTL where this asks
-- EXISTS: the same -2 / 0); a Campaign asks the ZSCORE, then that
-- EXISTS, at once (the same three conditions). All in one script, which nothing
-- interleaves. (The stamp is the Client's clock, not the server's: it
-- decides nothing, and only inspectors read it.) lock.lua's argument (why a lock key is only ever written
-- when it does not exist) holds for it unchanged. Sent twice, the copy
-- finds the lock (the first copy's hold) and answers SLOW; lock.lua then
-- finds the token holding the lock and answers held with its fence, as
-- lock.lua sent twice does. A Campaign's value is written in the hold's
-- own SET, as lock.lua writes it, and its observers are told as lock.lua
-- tells them.
local lock, token = KEYS[1], ARGV[1]
-- n: how many of the keys exist. A Campaign meets its election's dead
-- set (every Resign leaves a receipt there), so it skips the EXISTS that
-- would count it and asks one by one at once: two calls, not three.
local n = 1
if ARGV[5] then
  -- (a Campaign: asked one by one below)
elseif KEYS[4] then
  n = redis.call('EXISTS', lock, KEYS[3], KEYS[4])
else
  n = redis.call('EXISTS', lock, KEYS[3])
end
if n ~= 0 then
  -- Something exists (or a Campaign): maybe only the dead set, which also
  -- keeps receipts (an Election's every release leaves one). Asked one by
  -- one, as lock.lua asks them then: the caller's token buried, the lock
  -- there, (FairMutex) somebody waiting.
  if redis.call('ZSCORE', KEYS[3], token) then
    return SLOW
  end
  if KEYS[4] then
    n = redis.call('EXISTS', lock, KEYS[4])
  else
    n = redis.call('EXISTS', lock)
  end
  if n ~= 0 then
    return SLOW
  end
end
-- the hold's fence (next_fence in lib_queue.lua; read back as the
-- counter's string from 10^14 on: .. prints a number of 15 digits or
-- more inexactly)
local f = redis.call('INCR', KEYS[2])
if f >= 100000000000000 then
  f = redis.call('GET', KEYS[2])
end
-- the hold (new_hold in lib_mutex.lua), taken at the Client's stamp, with
-- its label and an Election's new leader's value
redis.call('SET', lock, token .. ' ' .. f .. ' ' .. ARGV[3] .. ' 1 0 ' .. (ARGV[4] or '0 '), 'PX', ARGV[2])
if not ARGV[5] then
  return {HELD, f}
end
-- @helpers
-- an Election's new leader: its observers told
publish(ARGV[6], ARGV[5], WAKE_ALL)
return {HELD, f}
