-- sem_renew.lua: extend a holder's permits.
--
-- KEYS[1]  (go: Lock) holders hash (see lib_sem.lua)
-- KEYS[2]  (go: Leases) leases: token -> hold expiry (server ms)
-- KEYS[3]  (go: Permits) capacity (see lib_sem.lua: it lives as long as the
--          holds)
-- ARGV[1]  (go: Token) owner token
-- ARGV[2]  (go: TTL) lease TTL in milliseconds
-- ARGV[3]  (go: Exact) '1' to set the hold's expiry to exactly now + ARGV[2]
--          (Extend); '0' to make it at least that (a watchdog renewal, which
--          must not shorten what an Extend lengthened)
-- ARGV[4]  (go: Seq) the call's place in the hold's sequence (in_order in
--          lib_queue.lua): a renewal or Extend older than a command of the
--          hold that ran changes nothing
--
-- Returns  1 renewed (or this very call ran already), 0 the caller holds
--          nothing (expired): its lease is lost; -4 STALE: a later command
--          of the hold ran first
local now = now_ms()
local until_ms = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]) or '0')
if until_ms <= now or redis.call('HEXISTS', KEYS[1], 'p:' .. ARGV[1]) == 0 then
  return 0
end
local order = in_order(KEYS[1], ARGV[1], ARGV[4])
if order == 'stale' then
  return STALE
elseif order == 'again' then
  return 1
end
local want = now + tonumber(ARGV[2])
if ARGV[3] == '1' or want > until_ms then
  redis.call('ZADD', KEYS[2], want, ARGV[1])
end
stretch(KEYS[1], ARGV[2])
stretch(KEYS[2], ARGV[2])
keep(KEYS[3], ARGV[2])
return 1
