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
--
-- More holds in one call (off a cluster: internal/backend, foldRenewals):
-- the i-th hold's key and four arguments in the places of the first's
-- plus i-1 and 4(i-1), and the reply the array of their replies, in order. Each is renewed as if
-- alone (the hold's own key and token): one call spares the server the
-- price of a call per renewal.
-- renew renews the hold at lock for token; the hold read as split in
-- lib_mutex.lua does (written out: this script has no helpers).
local function renew(lock, token, ttl, exact, seq)
  local v = redis.call('GET', lock)
  if not v then
    return 0
  end
  local tok, rest, q, tail = string.match(v, '^(%S+) (%d+ %d+ %d+) (%d+) (.*)$')
  if tok ~= token then
    return 0
  end
  -- in order: a command older than one that ran is refused, a copy of the
  -- one that ran answers done
  local s = tonumber(seq)
  q = tonumber(q)
  if s <= q then
    if s == q then
      return 1
    end
    return STALE
  end
  if exact == '1' then
    -- exactly this TTL (Extend; a renewal while an Extend given up on may
    -- still land): its place written back in the same SET
    redis.call('SET', lock, tok .. ' ' .. rest .. ' ' .. seq .. ' ' .. tail, 'PX', ttl)
  else
    -- at least this TTL (stretch in lib_queue.lua, written out): Redis
    -- 7's PEXPIRE GT in one call, which sets the expiry only where it
    -- ends sooner; a server before Redis 7 refuses GT: there PTTL, then
    -- PEXPIRE. The value is left as it is, its place with it (a copy of
    -- this renewal that runs again lengthens again, from later: the lease
    -- only grows)
    if type(redis.pcall('PEXPIRE', lock, ttl, 'GT')) == 'table' and redis.call('PTTL', lock) < tonumber(ttl) then
      redis.call('PEXPIRE', lock, ttl)
    end
  end
  return 1
end

if #KEYS == 1 then
  return renew(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
end
local out = {}
for i = 1, #KEYS do
  local a = 4 * (i - 1)
  out[i] = renew(KEYS[i], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4])
end
return out
