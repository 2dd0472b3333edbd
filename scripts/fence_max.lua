-- fence_max.lua: raise a fence counter to at least a value (RedLock:
-- after a majority is held, every node of it is brought up to the highest
-- fence, so that any later majority, which overlaps this one, counts on).
--
-- KEYS[1]  fence counter (never expires)
-- ARGV[1]  the value to raise it to, a decimal integer >= 0
--
-- Returns  the counter after the call (as a string: exact past 2^53)
--
-- The values are compared as decimal strings, not as Lua numbers, which
-- are doubles and would round counters past 2^53.
local cur = redis.call('GET', KEYS[1]) or '0'
local want = ARGV[1]
if #cur < #want or (#cur == #want and cur < want) then
  redis.call('SET', KEYS[1], want)
  return want
end
return cur
