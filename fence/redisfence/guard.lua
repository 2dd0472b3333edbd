-- guard.lua: a fenced write. It runs only if the write's fence is at
-- least every fence the resource has accepted, and records the fence, in
-- one step (a script: nothing interleaves).
--
-- KEYS[1]  the resource's record: the highest fence accepted (never
--          expires)
-- KEYS[2..] the keys written
-- ARGV[1]  the write's fence, a decimal integer >= 1
-- ARGV[2]  what to write: 'set' (ARGV[3] value, ARGV[4] TTL in ms, 0 for
--          none), 'del', or 'hset' (ARGV[3..] field, value, ...)
--
-- Returns  {1, fence}   written; the record is at least fence now
--          {0, highest} refused: the resource accepted a higher fence;
--                       nothing was written
--
-- Fences are compared as decimal strings (Go sends them without leading
-- zeros): Lua's numbers are doubles, exact only below 2^53.
local function below(a, b)
  return #a < #b or (#a == #b and a < b)
end
local f = ARGV[1]
local highest = redis.call('GET', KEYS[1]) or '0'
if below(f, highest) then
  return {0, highest}
end
if highest ~= f then
  redis.call('SET', KEYS[1], f)
end
local op = ARGV[2]
if op == 'set' then
  if ARGV[4] ~= '0' then
    redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
  else
    redis.call('SET', KEYS[2], ARGV[3])
  end
elseif op == 'del' then
  for i = 2, #KEYS do
    redis.call('DEL', KEYS[i])
  end
elseif op == 'hset' then
  redis.call('HSET', KEYS[2], unpack(ARGV, 3))
end
return {1, f}
