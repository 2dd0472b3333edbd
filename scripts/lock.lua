-- lock.lua: acquire the reentrant mutex, or re-enter a hold of it.
--
-- KEYS[1]  lock hash: owner token -> hold count
-- KEYS[2]  fence counter (INCR'd on first entry only; never expires)
-- ARGV[1]  owner token
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  0 to acquire; n >= 2 to re-enter, setting the hold count to n
--
-- Returns  {1, fence}  held; fence is the hold's fencing token
--          {0, pttl}   held by another owner, whose lease has pttl ms left
--          {-1}        re-entry asked for, but the caller holds nothing
--
-- Idempotent: go-redis retries a call whose reply was lost, so a call that
-- had already been applied answers the same when it runs again (the token
-- is already in the hash; the count is set, not added to).
local count = tonumber(ARGV[3])

if count == 0 then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('HSET', KEYS[1], ARGV[1], 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {HELD, next_fence(KEYS[2])}
  end
  if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
    -- our own earlier call, retried after its reply was lost
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {HELD, fence_at(KEYS[2])}
  end
  return {BUSY, redis.call('PTTL', KEYS[1])}
end

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return {NOT_HELD}
end
redis.call('HSET', KEYS[1], ARGV[1], count)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {HELD, fence_at(KEYS[2])}
