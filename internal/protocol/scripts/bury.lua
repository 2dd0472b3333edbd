-- bury.lua: refuse, from now on, every acquire of a token that its
-- acquire gave up on (Client.undo): a late copy of one of its attempts —
-- given up on by the client, its bytes still on their way (TCP holds them
-- while a path stalls), or sent again by go-redis — must not take the
-- lock, a read hold, permits or a place after the undo, and leave them
-- held by nobody. Every acquire script checks the token first.
--
-- KEYS[1]  (go: Dead) dead: token -> until when it is refused (server ms)
-- ARGV[1]  (go: Token) owner token
-- ARGV[2]  (go: For) how long to refuse it, in milliseconds
--
-- Returns  1
--
-- The key lives as long as its latest entry; expired entries are dropped
-- here. An attempt that arrives later still than that takes what it takes
-- for its own TTL at most, as a holder that crashed at once would.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
