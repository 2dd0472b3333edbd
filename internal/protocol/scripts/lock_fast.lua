-- lock_fast.lua: a first attempt to acquire a free mutex (Mutex or
-- FairMutex) that nobody waits for: lock.lua's common case alone, with
-- only the keys and arguments it reads. When that case does not hold it
-- changes nothing and answers SLOW, and Go runs lock.lua in its place
-- (internal/protocol/script.go, "Fast scripts").
--
-- KEYS[1]  (go: Lock) lock hash (lock.lua)
-- KEYS[2]  (go: Fence) the fence counter of the lock's slot
-- KEYS[3]  (go: Dead) dead: tokens of acquires given up on (bury.lua)
-- KEYS[4]  (go: Queue, if Fair) a FairMutex's queue: it takes the lock only
--          when nobody waits
-- ARGV[1]  (go: Token) owner token
-- ARGV[2]  (go: TTL) lease TTL in milliseconds
--
-- Returns  {1, fence}  held; fence is the hold's fencing token
--          SLOW        the lock exists (held, or kept for a waiter), a
--                      token was buried here, or (FairMutex) somebody
--                      waits: nothing changed
--
-- Why this grants only what lock.lua would: it is lock.lua's common case
-- (a first attempt, count 0, no place to give up, no Campaign), word for
-- word, under the same condition — one EXISTS over the lock, the dead set
-- and, for a FairMutex, the queue counts none of them — in one script,
-- which nothing interleaves. lock.lua's argument (why a lock hash is only
-- ever taken when it does not exist) holds for it unchanged. Sent twice,
-- the copy finds the lock (the first copy's hold) and answers SLOW; lock.lua
-- then finds the token in the hash and answers held with its fence, as
-- lock.lua sent twice does.
local lock, token = KEYS[1], ARGV[1]
local n
if KEYS[4] then
  n = redis.call('EXISTS', lock, KEYS[3], KEYS[4])
else
  n = redis.call('EXISTS', lock, KEYS[3])
end
if n ~= 0 then
  return SLOW
end
-- the hold's fence (next_fence in lib_queue.lua)
local f = redis.call('INCR', KEYS[2])
if f >= 9007199254740992 then
  f = redis.call('GET', KEYS[2])
end
-- when it was taken, in server ms (stamp_ms in lib_mutex.lua)
local t = redis.call('TIME')
redis.call('HSET', lock, token, '1', 't:' .. token, t[1] .. string.sub('00000' .. t[2], -6, -4), 'f:' .. token, f)
redis.call('PEXPIRE', lock, ARGV[2])
return {HELD, f}
