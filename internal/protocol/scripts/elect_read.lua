-- elect_read.lua: who leads an Election, read in one step.
--
-- KEYS[1]  (go: Lock) the election's lock hash (see elect.lua): the leader's
--          term is its hold's fence
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
local h = redis.call('HGETALL', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
for i = 1, #h, 2 do
  local f = h[i]
  if f ~= '@next' and string.sub(f, 2, 2) ~= ':' then
    local v = redis.call('HGET', KEYS[1], 'v:' .. f)
    if v then
      local since = redis.call('HGET', KEYS[1], 't:' .. f) or '0'
      local term = redis.call('HGET', KEYS[1], 'f:' .. f) or '0'
      return {HELD, f, v, term, since, pttl}
    end
  end
end
return {BUSY, pttl}
