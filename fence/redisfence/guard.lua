-- guard.lua: a fenced write. It runs only if the write's fence is at
-- least every fence the resource has accepted, and records the fence, in
-- one step (a script: nothing interleaves).
--
-- KEYS[1]  the resource's record: the highest fence accepted (never
--          expires)
-- KEYS[2]  the resource's receipts: write id -> until when it is kept
--          (server ms); the key lives as long as its latest entry
-- KEYS[3..] the keys written
-- ARGV[1]  the write's fence, a decimal integer >= 1
-- ARGV[2]  the write's id: random, one per call of the guard, the same in
--          every copy of the call a client library sends
-- ARGV[3]  how long to keep the write's receipt, in ms (>= 1)
-- ARGV[4]  what to write: 'set' (ARGV[5] value, ARGV[6] TTL in ms, 0 for
--          none), 'del', or 'hset' (ARGV[5..] field, value, ...)
--
-- Returns  {1, fence}   written (or, for a copy, written by the first
--                       copy); the record is at least fence now
--          {0, highest} refused: the resource accepted a higher fence;
--                       nothing was written
--
-- A copy of a write that ran (go-redis sends a command again when its
-- reply is late; TCP may deliver a command after its client gave up)
-- finds its receipt and answers as the first copy did, writing nothing:
-- the first copy's answer, lost on its way, was "written", and the store
-- holds what it wrote — even if a newer owner wrote since, when the copy
-- itself would be refused. A copy that arrives after its receipt expired
-- is checked as a new write.
--
-- Fences are compared as decimal strings (Go sends them without leading
-- zeros): Lua's numbers are doubles, exact only below 2^53.
local function below(a, b)
  return #a < #b or (#a == #b and a < b)
end
local f, id = ARGV[1], ARGV[2]
if redis.call('ZSCORE', KEYS[2], id) then
  return {1, f}
end
local highest = redis.call('GET', KEYS[1]) or '0'
if below(f, highest) then
  return {0, highest}
end
if highest ~= f then
  redis.call('SET', KEYS[1], f)
end
local op = ARGV[4]
if op == 'set' then
  if ARGV[6] ~= '0' then
    redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[6])
  else
    redis.call('SET', KEYS[3], ARGV[5])
  end
elseif op == 'del' then
  for i = 3, #KEYS do
    redis.call('DEL', KEYS[i])
  end
elseif op == 'hset' then
  redis.call('HSET', KEYS[3], unpack(ARGV, 5))
end
-- the receipt; expired ones go
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local keep = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZADD', KEYS[2], now + keep, id)
if redis.call('PTTL', KEYS[2]) < keep then
  redis.call('PEXPIRE', KEYS[2], keep)
end
return {1, f}
