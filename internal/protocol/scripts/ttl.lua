-- ttl.lua: how long the caller's hold has left, as the server sees it.
--
-- KEYS[1]  (go: Lock) lock hash: owner token -> hold count
-- ARGV[1]  (go: Token) owner token
--
-- Returns  pttl >= 0  milliseconds left
--          -1         held without expiry (never set by dlock)
--          -3         the caller holds nothing
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return redis.call('PTTL', KEYS[1])
end
return TTL_NOT_HELD
