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
