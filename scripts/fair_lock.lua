-- fair_lock.lua: acquire the fair mutex in arrival order, or keep a place
-- in its queue. (Re-entry uses lock.lua: the lock hash is the same.)
--
-- KEYS[1]  lock hash: owner token -> hold count
-- KEYS[2]  fence counter (INCR'd on first entry only; never expires)
-- KEYS[3]  queue: token -> arrival (server µs)
-- KEYS[4]  alive: token -> place expiry (server ms)
-- ARGV[1]  owner token
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  place TTL in milliseconds; 0 for TryLock: take the lock only if
--          it is free and nobody waits, and take no place
-- ARGV[4]  channel, ARGV[5] publish command (PUBLISH or SPUBLISH)
--
-- Returns  {1, fence}  held (idempotent: a retried call that had already
--                      taken the lock answers the same)
--          {0, wait}   not yet: try again within wait ms at the latest
local lock, fence, queue, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, place_ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()

if redis.call('HEXISTS', lock, token) == 1 then
  redis.call('PEXPIRE', lock, ttl)
  unqueue(queue, alive, token)
  return {HELD, fence_at(fence)}
end

local dropped = purge(queue, alive, now)
local first = head(queue)
if redis.call('EXISTS', lock) == 0 then
  if first == nil or first == token then
    redis.call('HSET', lock, token, 1)
    redis.call('PEXPIRE', lock, ttl)
    unqueue(queue, alive, token)
    return {HELD, next_fence(fence)}
  end
  if dropped > 0 then
    -- the waiters ahead of first died: tell it its turn has come
    redis.call(ARGV[5], ARGV[4], first)
  end
end

if place_ttl == 0 then
  return {BUSY, math.max(redis.call('PTTL', lock), 0)}
end
place(queue, alive, token, now, place_ttl)
local wait = redis.call('PTTL', lock)
if wait < 0 then
  -- free, but another's turn: at the latest when its place would expire
  wait = tonumber(redis.call('ZSCORE', alive, first)) - now
end
return {BUSY, wait}
