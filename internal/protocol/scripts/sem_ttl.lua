-- sem_ttl.lua: how long a holder's permits have left.
--
-- KEYS[1]  (go: Lock) holders hash (see lib_sem.lua)
-- KEYS[2]  (go: Leases) leases: token -> hold expiry (server ms)
-- ARGV[1]  (go: Token) owner token
--
-- Returns  ms left, or -3 when the caller holds nothing
if redis.call('HEXISTS', KEYS[1], 'p:' .. ARGV[1]) == 0 then
  return TTL_NOT_HELD
end
local left = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]) or '0') - now_ms()
if left <= 0 then
  return TTL_NOT_HELD
end
return left
