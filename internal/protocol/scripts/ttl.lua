-- ttl.lua: how long the caller's hold has left, as the server sees it.
--
-- KEYS[1]  (go: Lock) lock: the hold, one string (lib_mutex.lua)
-- ARGV[1]  (go: Token) owner token
--
-- Returns  pttl >= 0  milliseconds left
--          -1         held without expiry (never set by dlock)
--          -3         the caller holds nothing
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then
  return redis.call('PTTL', KEYS[1])
end
return TTL_NOT_HELD
