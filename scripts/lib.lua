-- lib.lua: helpers shared by every script that needs them. Not a script
-- by itself: it is put in front of the scripts that use it when they are
-- loaded (see script.go).

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
