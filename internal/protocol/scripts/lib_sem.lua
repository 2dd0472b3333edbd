-- lib_sem.lua: helpers shared by the semaphore's scripts. Not a script by
-- itself: it is put in front of them (after lib.lua).
--
-- The holders are one hash:
--   p:<tok>  permits the holder has
--   f:<tok>  the holder's fence
--   t:<tok>  when the holder took them (server ms)
--   l:<tok>  the holder's label (WithLabel; label.lua), deleted with f:
--   q:<tok>  the highest command of the hold's sequence that ran (in_order
--            in lib_queue.lua)
-- and a sorted set 'leases': token -> when its hold expires (server ms), so
-- that each holder's permits come back on their own when it stops renewing
-- (crashed, cut off). Both keys live as long as their longest hold. The
-- capacity is a plain key. Set by SetPermits it never expires; set by an
-- acquire (the capacity its handle was made with, when the semaphore has
-- none) it lives as long as the semaphore's holders and waiters (keep):
-- an idle semaphore leaves no key behind, and the next acquire sets its
-- capacity again. While anyone holds or waits it is there, so every
-- acquire meanwhile counts against the same capacity.

-- drop removes a holder.
-- The label ('l:<tok>', label.lua) goes with the fence: it decides
-- nothing, so deleting it with the rest grants nothing to anyone.
local function drop(holders, leases, tok)
  redis.call('HDEL', holders, 'p:' .. tok, 'f:' .. tok, 't:' .. tok, 'q:' .. tok, 'l:' .. tok)
  redis.call('ZREM', leases, tok)
end

-- expire_holders returns the permits of holders whose hold has expired.
local function expire_holders(holders, leases, now)
  for _, d in ipairs(redis.call('ZRANGEBYSCORE', leases, '-inf', now)) do
    drop(holders, leases, d)
  end
end

-- used is the number of permits held.
local function used(holders)
  local n = 0
  local all = redis.call('HGETALL', holders)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'p:' then
      n = n + tonumber(all[i + 1])
    end
  end
  return n
end

-- capacity returns the semaphore's capacity, setting it to default for
-- ttl ms if it has none yet.
local function capacity(cap_key, default, ttl)
  local cap = tonumber(redis.call('GET', cap_key))
  if not cap then
    redis.call('SET', cap_key, default, 'PX', ttl)
    cap = tonumber(default)
  end
  return cap
end

-- keep makes a capacity set by an acquire live at least ttl ms more (one
-- set by SetPermits has no expiry, and keeps none): Redis 7's PEXPIRE GT,
-- which sets an expiry only where one ends sooner (it counts a key without
-- one as never expiring), in one call; before Redis 7, which refuses GT,
-- PTTL then PEXPIRE.
local function keep(cap_key, ttl)
  if type(redis.pcall('PEXPIRE', cap_key, ttl, 'GT')) ~= 'table' then
    return
  end
  local left = redis.call('PTTL', cap_key)
  if left >= 0 and left < tonumber(ttl) then
    redis.call('PEXPIRE', cap_key, ttl)
  end
end

-- Waiters (lib_queue.lua) are served in arrival order: the first waiter's
-- permits are kept for it — a newcomer or a later waiter takes permits only
-- if they fit beside them — so a large request is not starved by a stream
-- of small ones. A waiter's member ends with the permits it waits for:
-- '<client id>:<token>:<n>'.

-- need_of is the permits a waiter waits for.
local function need_of(member)
  return tonumber(string.match(member, ':(%d+)$'))
end

-- kept is the permits kept for the first live waiter, unless it is member.
local function kept(queue, alive, member)
  local h = first_live(queue, alive)
  if h == nil or h == member then
    return 0
  end
  return need_of(h)
end

-- wake_fitting tells the waiters, in order, whose permits fit in free,
-- stopping at the first that does not fit.
local function wake_fitting(queue, alive, free, base, pub)
  if free <= 0 or redis.call('EXISTS', queue) == 0 then
    return
  end
  purge(queue, alive, now_ms())
  local i = 0
  while true do
    local m = redis.call('ZRANGE', queue, i, i)[1]
    if m == nil or need_of(m) > free then
      return
    end
    tell(m, base, pub)
    free = free - need_of(m)
    i = i + 1
  end
end
