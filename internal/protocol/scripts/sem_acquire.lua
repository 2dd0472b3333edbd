-- sem_acquire.lua: take n permits of the semaphore, or keep a waiter's
-- place in its queue.
--
-- KEYS[1]  (go: Lock) holders hash (see lib_sem.lua)
-- KEYS[2]  (go: Fence) the fence counter of the semaphore's slot (next_fence in
--          lib_queue.lua)
-- KEYS[3]  (go: Leases) leases: token -> hold expiry (server ms)
-- KEYS[4]  (go: Permits) capacity (see lib_sem.lua)
-- KEYS[5]  (go: Queue) queue
-- KEYS[6]  (go: Alive) alive (see lib_queue.lua)
-- KEYS[7]  (go: Dead) dead: tokens whose acquire was given up on (bury.lua)
-- ARGV[1]  (go: Token) owner token
-- ARGV[2]  (go: TTL) lease TTL in milliseconds
-- ARGV[3]  (go: Permits) permits wanted, n >= 1
-- ARGV[4]  (go: Capacity) capacity to set if the semaphore has none yet
-- ARGV[5]  (go: Member) the waiter's member ('<client id>:<token>:<n>'); ''
--          for none
-- ARGV[6]  (go: PlaceTTL) place TTL in milliseconds; 0 to take no place
--          (TryAcquire)
--
-- Returns  {1, fence}    held (idempotent: a retried call answers the same)
--          {0, wait}     not enough free beside what is kept for the first
--                        waiter: try again within wait ms at the latest
--                        (when the first hold would expire)
--          {-1}          an attempt of an acquire given up on (bury.lua)
--          {-2, cap}     n is above the capacity: it can never be granted
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
local holders, fence, leases, cap_key, queue, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local tok, ttl, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local member, place_ttl = ARGV[5], tonumber(ARGV[6])
if redis.call('ZSCORE', KEYS[7], tok) then
  return {NOT_HELD} -- a late attempt of an acquire given up on
end
local now = now_ms()
expire_holders(holders, leases, now)

if redis.call('HEXISTS', holders, 'p:' .. tok) == 1 then
  -- this acquire, sent again: it only lengthens (a late copy must not
  -- shorten what an Extend set)
  if now + ttl > tonumber(redis.call('ZSCORE', leases, tok) or '0') then
    redis.call('ZADD', leases, now + ttl, tok)
  end
  stretch(holders, ttl)
  stretch(leases, ttl)
  keep(cap_key, ttl)
  unqueue(queue, alive, member)
  return {HELD, redis.call('HGET', holders, 'f:' .. tok)}
end
local cap = capacity(cap_key, ARGV[4], ttl)
if n > cap then
  return {TOO_MANY, cap}
end
if used(holders) + n + kept(queue, alive, member) > cap then
  if place_ttl > 0 then
    place(queue, alive, member, now, place_ttl)
    keep(cap_key, place_ttl)
  end
  local first = redis.call('ZRANGE', leases, 0, 0, 'WITHSCORES')
  local wait = ttl
  if first[2] then
    wait = math.max(tonumber(first[2]) - now, 0)
  end
  return {BUSY, wait}
end
local f = next_fence(fence)
redis.call('HSET', holders, 'p:' .. tok, n, 'f:' .. tok, f, 't:' .. tok, now)
redis.call('ZADD', leases, now + ttl, tok)
stretch(holders, ttl)
stretch(leases, ttl)
keep(cap_key, ttl)
if member ~= '' and redis.call('ZREM', queue, member) == 1 then
  redis.call('ZREM', alive, member)
end
return {HELD, f}
