-- lib_sem.lua: helpers shared by the semaphore's scripts. Not a script by
-- itself: it is put in front of them (after lib.lua).
--
-- The holders are one hash:
--   p:<tok>  permits the holder has
--   f:<tok>  the holder's fence
-- and a sorted set 'leases': token -> when its hold expires (server ms), so
-- that each holder's permits come back on their own when it stops renewing
-- (crashed, cut off). Both keys live as long as their longest hold. The
-- capacity is a plain key that never expires, like the fence counter.

-- drop removes a holder.
local function drop(holders, leases, tok)
  redis.call('HDEL', holders, 'p:' .. tok, 'f:' .. tok)
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

-- capacity returns the semaphore's capacity, setting it to default if it
-- has none yet.
local function capacity(cap_key, default)
  local cap = tonumber(redis.call('GET', cap_key))
  if not cap then
    redis.call('SET', cap_key, default)
    cap = tonumber(default)
  end
  return cap
end
