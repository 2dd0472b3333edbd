-- rw_ttl.lua: how long a read or write hold has left, as the server sees it.
--
-- KEYS[1]  (go: Lock) lock hash (see lib_rw.lua)
-- KEYS[2]  (go: Readers) readers: token -> hold expiry (server ms)
-- ARGV[1]  (go: Token) owner token
-- ARGV[2]  (go: Side) 'r' for a read hold, 'w' for the write hold
--
-- Returns  ms left, or -3 when the caller holds nothing
local lock, readers, tok, side = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
if redis.call('HEXISTS', lock, side .. ':' .. tok) == 0 then
  return TTL_NOT_HELD
end
if side == 'r' then
  local left = tonumber(redis.call('ZSCORE', readers, tok) or '0') - now_ms()
  if left <= 0 then
    return TTL_NOT_HELD
  end
  return left
end
return redis.call('PTTL', lock)
