-- renew.lua: extend the lease of a hold the caller still owns.
--
-- KEYS[1]  (go: Lock) lock: the hold, one string (lib_mutex.lua)
-- ARGV[1]  (go: Token) owner token
-- ARGV[2]  (go: TTL) lease TTL in milliseconds
-- ARGV[3]  (go: Exact) '1' to set the TTL to exactly ARGV[2] (Extend); '0' to
--          make it at least ARGV[2] (a watchdog renewal: one still in flight
--          when Extend lengthened the lease must not shorten it again)
-- ARGV[4]  (go: Seq) the command's place in its hold's sequence (see internal/hold/hold.go,
--          "Late commands"): the hold keeps the highest one that ran of
--          the commands that set it exactly (ARGV[3] '1'); a renewal that
--          only lengthens is checked against it and keeps none
--
-- Returns  1  renewed (or this very call ran already: a copy sent again)
--          0  the caller holds nothing (the key expired, was deleted or
--             belongs to another owner): the lease is lost
--          -4 STALE: a later command of the hold ran first; nothing changed
-- The hold, read as split in lib_mutex.lua does (written out: this
-- script has no helpers).
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local tok, rest, q, tail = string.match(v, '^(%S+) (%d+ %d+ %d+) (%d+) (.*)$')
if tok ~= ARGV[1] then
  return 0
end
-- in order: a command older than one that ran is refused, a copy of the
-- one that ran answers done
local s = tonumber(ARGV[4])
q = tonumber(q)
if s <= q then
  if s == q then
    return 1
  end
  return STALE
end
if ARGV[3] == '1' then
  -- exactly this TTL (Extend; a renewal while an Extend given up on may
  -- still land): its place written back in the same SET
  redis.call('SET', KEYS[1], tok .. ' ' .. rest .. ' ' .. ARGV[4] .. ' ' .. tail, 'PX', ARGV[2])
elseif redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  -- at least this TTL (stretch in lib_queue.lua, written out): the value
  -- is left as it is, its place with it (a copy of this renewal that runs
  -- again lengthens again, from later: the lease only grows)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
