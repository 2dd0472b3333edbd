-- lock_all.lua: take several mutexes at once, all or none.
--
-- KEYS[2i-1]  lock hash of the i-th mutex: owner token -> hold count
-- KEYS[2i]    its fence counter (never expires)
-- ARGV[1]     owner token (the same for every mutex of the set)
-- ARGV[i+1]   the i-th mutex's lease TTL in milliseconds
--
-- Returns  {1, fence_1, ..., fence_n}  all held (idempotent: a retried
--                                      call answers the same)
--          {0, i, pttl}                the i-th is held by another owner
--                                      (pttl ms left); nothing was taken
local tok = ARGV[1]
local n = #KEYS / 2
for i = 1, n do
  local lock = KEYS[2 * i - 1]
  if redis.call('HEXISTS', lock, tok) == 0 and redis.call('EXISTS', lock) == 1 then
    return {BUSY, i, redis.call('PTTL', lock)}
  end
end
local out = {1}
for i = 1, n do
  local lock, fence, ttl = KEYS[2 * i - 1], KEYS[2 * i], ARGV[i + 1]
  if redis.call('HEXISTS', lock, tok) == 1 then
    redis.call('PEXPIRE', lock, ttl)
    out[i + 1] = fence_at(fence)
  else
    redis.call('HSET', lock, tok, 1)
    redis.call('PEXPIRE', lock, ttl)
    out[i + 1] = next_fence(fence)
  end
end
return out
