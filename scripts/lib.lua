-- lib.lua: what every script shares. Not a script by itself: it is put in
-- front of every script when it is loaded (see script.go).

-- The protocol between the scripts and Go. protocol.go names the same
-- values, and a test checks that both say the same.
--
-- Reply codes (first element of an array reply, or the whole reply):
local HELD = 1          -- {1, fence} acquired or re-entered; 1 released or renewed
local BUSY = 0          -- {0, pttl} held by another owner; 0 renewal found nothing
local NOT_HELD = -1     -- {-1} or -1: the caller holds nothing
local TOO_MANY = -2     -- {-2, capacity} a semaphore request above its capacity
local TTL_NOT_HELD = -3 -- ttl scripts: the caller holds nothing
-- Wake message published on a lock's channel (a latch, an RWMutex's
-- readers); a waiter whose turn it is is told on its client's own channel
-- (lib_queue.lua):
local WAKE_ALL = 'all'   -- wake every waiter

-- publish sends msg on channel with pub (PUBLISH or SPUBLISH). Every
-- script publishes through it, after its writes: a refused publish (an ACL
-- user without the channel: Redis 7 grants none by default) must not fail
-- the script, whose writes stand (Redis does not roll them back), so it is
-- run with pcall and its error kept in refused. A script that may publish
-- is wrapped when it is loaded (script.go): when refused is set, its reply
-- R comes back as {REFUSED, error, R}, and Go unwraps it.
local REFUSED = 'dlock:refused'
local refused = false
local function publish(pub, channel, msg)
  local r = redis.pcall(pub, channel, msg)
  if type(r) == 'table' and r.err then
    refused = r.err
  end
end

-- now_ms is the server's time in milliseconds.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- stretch makes key live at least ttl ms more.
local function stretch(key, ttl)
  if redis.call('PTTL', key) < tonumber(ttl) then
    redis.call('PEXPIRE', key, ttl)
  end
end

-- Fences are returned exactly. Lua numbers are doubles, exact only below
-- 2^53, so a counter at or past that is read back as the string Redis
-- stores (Go parses either). Never do arithmetic on a fence here.

-- next_fence INCRs the fence counter at key and returns the new value.
local function next_fence(key)
  local f = redis.call('INCR', key)
  if f >= 9007199254740992 then
    return redis.call('GET', key)
  end
  return f
end

-- fence_at is the fence counter at key as stored ('0' if unset).
local function fence_at(key)
  return redis.call('GET', key) or '0'
end

-- set_holds sets the hold count of field (an owner token, or a side and a
-- token) in the lock hash to n: re-entry, or an inner unlock; n = 0 frees
-- the lock (deletes the hash). Returns NOT_HELD when the caller holds
-- nothing, 1 when it still holds the lock, 0 when the lock is free now.
local function set_holds(lock, field, n)
  if redis.call('HEXISTS', lock, field) == 0 then
    return NOT_HELD
  end
  if tonumber(n) > 0 then
    redis.call('HSET', lock, field, n)
    return 1
  end
  redis.call('DEL', lock)
  return 0
end

-- dequeue removes member from a lock's queue (lib_queue.lua) if it is
-- there (one call if not).
local function dequeue(queue, alive, member)
  if member ~= '' and redis.call('ZREM', queue, member) == 1 then
    redis.call('ZREM', alive, member)
  end
end
