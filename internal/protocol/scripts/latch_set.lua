-- latch_set.lua: set a count-down latch's count, if it has none; this
-- begins a new phase of the latch, named by the call's id.
--
-- KEYS[1]  (go: Lock) count (a string: the count left; deleted when the latch
--          opens)
-- KEYS[2]  (go: Calls) calls: what the latch's current (or last) phase
--          remembers, a hash: '@p' -> the phase's id; 'n:<call id>' -> the
--          count a count-down left; 'o:<id>' -> 1 for a CountDownOnce id
-- KEYS[3]  (go: CallsPrev) the calls of the phase before it (the same shape)
-- ARGV[1]  (go: Count) count, n >= 1
-- ARGV[2]  (go: TTL) TTL of the latch in milliseconds
-- ARGV[3]  (go: ID) the call's id: random, one per TrySetCount call; the
--          phase's id
--
-- Returns  {1, phase} set, by this copy of the call or an earlier one;
--          {0, phase} the latch has a count, of that phase ('' when no
--          phase is known: set by an older dlock)
--
-- Copies of a call (a client's re-send, bytes delivered late) all carry
-- its id. A copy that finds its id as the current or the last phase's is
-- a copy of the call that set it, and answers 1 without setting anything:
-- a latch is set at most once per call, and a re-sent call is not told
-- it failed. (A copy that arrives once two more phases have begun answers
-- 0, and one that arrives after the latch's TTL has passed, its memory
-- gone, sets it again: see latch.go.)
--
-- Every key lives at most the latch's TTL: the calls of the phase that
-- ends are kept, as KEYS[3], for the new phase's TTL.
local cur = redis.call('HGET', KEYS[2], '@p')
if cur == ARGV[3] or redis.call('HGET', KEYS[3], '@p') == ARGV[3] then
  return {1, ARGV[3]}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, cur or ''}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if cur then
  redis.call('RENAME', KEYS[2], KEYS[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
else
  redis.call('DEL', KEYS[2], KEYS[3])
end
redis.call('HSET', KEYS[2], '@p', ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return {1, ARGV[3]}
