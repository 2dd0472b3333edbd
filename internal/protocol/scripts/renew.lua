-- renew.lua: extend the lease of a hold the caller still owns.
--
-- KEYS[1]  (go: Lock) lock hash: owner token -> hold count
-- ARGV[1]  (go: Token) owner token
-- ARGV[2]  (go: TTL) lease TTL in milliseconds
-- ARGV[3]  (go: Exact) '1' to set the TTL to exactly ARGV[2] (Extend); '0' to
--          make it at least ARGV[2] (a watchdog renewal: one still in flight
--          when Extend lengthened the lease must not shorten it again)
-- ARGV[4]  (go: Seq) the command's place in its hold's sequence (see internal/hold/hold.go,
--          "Late commands"): the hold's field 'q:<token>' keeps the highest
--          one that ran
--
-- Returns  1  renewed (or this very call ran already: a copy sent again)
--          0  the caller holds nothing (the key expired, was deleted or
--             belongs to another owner): the lease is lost
--          -4 STALE: a later command of the hold ran first; nothing changed
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
-- in order (written out: this script has no helpers): a command older
-- than one that ran is refused, a copy of the one that ran answers done
local q, s = tonumber(redis.call('HGET', KEYS[1], 'q:' .. ARGV[1]) or '0'), tonumber(ARGV[4])
if s <= q then
  if s == q then
    return 1
  end
  return STALE
end
redis.call('HSET', KEYS[1], 'q:' .. ARGV[1], ARGV[4])
-- (stretch in lib_queue.lua, written out: this script has no helpers)
if ARGV[3] == '1' or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
