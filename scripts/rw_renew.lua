-- rw_renew.lua: extend a read or write hold of the read-write lock.
--
-- KEYS[1]  lock hash (see lib_rw.lua)
-- KEYS[2]  readers: token -> hold expiry (server ms)
-- ARGV[1]  owner token
-- ARGV[2]  'r' for a read hold, 'w' for the write hold
-- ARGV[3]  new lease TTL in milliseconds
--
-- Returns  1 renewed, 0 the caller holds nothing (its hold expired or was
--          taken away): its lease is lost
local lock, readers, tok, side, ttl = KEYS[1], KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[3])
if redis.call('HEXISTS', lock, side .. ':' .. tok) == 0 then
  return 0
end
if side == 'r' then
  local now = now_ms()
  local until_ms = tonumber(redis.call('ZSCORE', readers, tok) or '0')
  if until_ms <= now then
    return 0
  end
  redis.call('ZADD', readers, now + ttl, tok)
  stretch(readers, ttl)
  stretch(lock, ttl)
  return 1
end
redis.call('PEXPIRE', lock, math.max(redis.call('PTTL', lock), ttl))
return 1
