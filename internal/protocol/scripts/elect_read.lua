-- elect_read.lua: who leads an Election, read in one step.
--
-- KEYS[1]  (go: Lock) the election's lock (see elect.lua): the leader's
--          hold, one string (lib_mutex.lua), whose fence is its term
--
-- Returns  {1, token, value, term, since, pttl}  a leader: its owner
--                   token, value, term, when it took the lock (server
--                   ms) and the milliseconds its lease has left
--          {0, pttl}  nobody leads; pttl > 0: the lock is held by a
--                   winner whose value is not recorded yet, or kept for
--                   the next candidate, for pttl ms at most; -2 if free
--
-- A winner counts as leader only once its value is recorded (elect.lua):
-- its Campaign has not returned before that, and may yet fail.
-- (split and the tail as lib_mutex.lua reads them, written out: this
-- script has no helpers)
local pttl = redis.call('PTTL', KEYS[1])
local v = redis.call('GET', KEYS[1])
if v then
  local tok, term, since, n, rest = string.match(v, '^(%S+) (%d+) (%d+) %d+ %d+ (%d+)v (.*)$')
  if tok then
    return {HELD, tok, string.sub(rest, tonumber(n) + 1), term, since, pttl}
  end
end
return {BUSY, pttl}
