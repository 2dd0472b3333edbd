-- rw_read.lua: take or re-enter a read hold of the read-write lock.
--
-- KEYS[1]  lock hash (see lib_rw.lua)
-- KEYS[2]  fence counter (never expires)
-- KEYS[3]  readers: token -> hold expiry (server ms)
-- KEYS[4]  writers' queue: token -> arrival (server µs)
-- KEYS[5]  writers' places: token -> place expiry (server ms)
-- ARGV[1]  owner token (a writer's own token to read inside its write hold)
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  0 to acquire; n >= 2 to re-enter, setting the hold count to n
-- ARGV[4]  '1' to let readers in while writers wait (reader preference)
--
-- Returns  {1, fence}  held (idempotent: a retried acquire answers the same)
--          {0, wait}   not now: try again within wait ms at the latest
--          {-1}        re-entry asked for, but the caller holds nothing
local lock, fence, readers, queue, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local tok, ttl, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local r = 'r:' .. tok
local now = now_ms()
expire_readers(lock, readers, now)

if count > 0 then
  if set_holds(lock, r, count) == NOT_HELD then
    return {NOT_HELD}
  end
  redis.call('ZADD', readers, now + ttl, tok)
  stretch(lock, ttl)
  stretch(readers, ttl)
  return {HELD, redis.call('HGET', lock, 'f:' .. tok)}
end

local function take(f)
  redis.call('HSET', lock, r, 1, 'f:' .. tok, f)
  if not redis.call('HGET', lock, 'mode') then
    redis.call('HSET', lock, 'mode', 'read')
  end
  redis.call('ZADD', readers, now + ttl, tok)
  stretch(lock, ttl)
  stretch(readers, ttl)
  return {HELD, f}
end

if redis.call('HEXISTS', lock, r) == 1 then
  return take(redis.call('HGET', lock, 'f:' .. tok))
end
local mode = redis.call('HGET', lock, 'mode')
if mode == 'write' then
  if redis.call('HEXISTS', lock, 'w:' .. tok) == 1 then
    -- a writer reading inside its own write hold: its fence
    return take(redis.call('HGET', lock, 'f:' .. tok))
  end
  return {BUSY, math.max(redis.call('PTTL', lock), 0)}
end
purge(queue, alive, now)
local first = head(queue)
if first and ARGV[4] ~= '1' then
  -- a writer waits: new readers queue behind it, until the writer has had
  -- its turn or its place expires
  local wait = tonumber(redis.call('ZSCORE', alive, first)) - now
  if mode == 'read' then
    wait = math.min(wait, math.max(redis.call('PTTL', lock), 0))
  end
  return {BUSY, wait}
end
return take(next_fence(fence))
