-- quorum_fence.lua: one node's part in a RedLock fence (quorum.go,
-- "Fences on a quorum"): raise the lock's fence counter to at least a
-- value, say whether the node kept its state, and mark it as having it.
--
-- KEYS[1]  (go: Fence) fence counter (never expires)
-- KEYS[2]  (go: Mark) the node's mark: set once its counters are known to be at
--          least every fence issued; a restart without persistence loses
--          it with the counters
-- ARGV[1]  (go: Fence) the value to raise the counter to, a decimal integer
--          >= 0
-- ARGV[2]  (go: Mark) '1' to mark the node
--
-- Returns  {marked, counter}: 1 if the node was marked before this call,
--          else 0; the counter after the call (as a string: exact past
--          2^53)
--
-- Values are compared as decimal strings, not Lua numbers (doubles).
local marked = redis.call('EXISTS', KEYS[2])
local cur = redis.call('GET', KEYS[1]) or '0'
local want = ARGV[1]
if #cur < #want or (#cur == #want and cur < want) then
  redis.call('SET', KEYS[1], want)
  cur = want
end
if ARGV[2] == '1' and marked == 0 then
  redis.call('SET', KEYS[2], '1')
end
return {marked, cur}
