-- rw_renew.lua: extend a read or write hold of the read-write lock.
--
-- KEYS[1]  (go: Lock) lock hash (see lib_rw.lua)
-- KEYS[2]  (go: Readers) readers: token -> hold expiry (server ms)
-- ARGV[1]  (go: Token) owner token
-- ARGV[2]  (go: Side) 'r' for a read hold, 'w' for the write hold
-- ARGV[3]  (go: TTL) lease TTL in milliseconds
-- ARGV[4]  (go: Exact) '1' to set the hold's TTL to exactly ARGV[3] (Extend);
--          '0' to make it at least that (a watchdog renewal, which must not
--          shorten what an Extend lengthened)
-- ARGV[5]  (go: Seq) the call's place in the hold's sequence (in_order in
--          lib_queue.lua): a renewal or Extend older than a command of the
--          hold that ran changes nothing
--
-- Returns  1 renewed (or this very call ran already), 0 the caller holds
--          nothing (its hold expired or was taken away): its lease is
--          lost; -4 STALE: a later command of the hold ran first
local lock, readers, tok, side, ttl = KEYS[1], KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[3])
local exact = ARGV[4] == '1'
if redis.call('HEXISTS', lock, side .. ':' .. tok) == 0 then
  return 0
end
local now = now_ms()
if side == 'r' then
  local until_ms = tonumber(redis.call('ZSCORE', readers, tok) or '0')
  if until_ms <= now then
    return 0
  end
end
local order = in_order(lock, tok, ARGV[5])
if order == 'stale' then
  return STALE
elseif order == 'again' then
  return 1
end
if side == 'r' then
  local until_ms = tonumber(redis.call('ZSCORE', readers, tok) or '0')
  if until_ms <= now then
    return 0
  end
  if exact or now + ttl > until_ms then
    redis.call('ZADD', readers, now + ttl, tok)
  end
  stretch(readers, ttl)
  stretch(lock, ttl)
  return 1
end
if not exact then
  stretch(lock, ttl)
  return 1
end
-- The write hold's TTL is the hash's; read holds of the same owner (a
-- writer reading inside its write hold) keep theirs.
local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
if last[2] then
  ttl = math.max(ttl, tonumber(last[2]) - now)
end
redis.call('PEXPIRE', lock, ttl)
return 1
