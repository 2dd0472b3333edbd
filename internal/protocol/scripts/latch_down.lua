-- latch_down.lua: count a latch down by one, once per call (and once per
-- CountDownOnce id), in the phase the call belongs to; at zero the count
-- is deleted and every waiter is woken.
--
-- KEYS[1]  (go: Lock) count
-- KEYS[2]  (go: Calls) calls
-- KEYS[3]  (go: CallsPrev) the last phase's calls (see
--          latch_set.lua)
-- ARGV[1]  (go: ID) the call's id: random, one per CountDown or CountDownOnce
--          call
-- ARGV[2]  (go: Phase) the phase the call belongs to: the id of the
--          TrySetCount that began it ('' for a latch set by an older dlock),
--          or '?' when the caller does not know it yet (nothing is counted
--          then)
-- ARGV[3]  (go: Once) the CountDownOnce id, counted once per phase; '' for
--          CountDown
-- ARGV[4]  (go: Channel) channel
-- ARGV[5]  (go: Publish) publish command (PUBLISH or SPUBLISH)
--
-- Returns  {status, count, phase}, phase being the latch's current or last
--          phase (its count is 0 when it is open), and status one of
--          'done'    the call is answered: count is the count it left, or
--                    that a copy of it left (0 once its phase has ended)
--          'moved'   the call has not counted, and its phase is not the
--                    latch's (or was '?'): count and phase are the latch's
--          'unsure'  the call's phase is older than the last one: it may
--                    have counted there; count and phase are the latch's
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
--
-- Why no call counts twice or in the wrong phase. Every copy of a call (a
-- client's re-send, or bytes delivered after the client gave up) carries
-- the call's id and phase, and counts only if its phase is the latch's
-- current phase: a copy that arrives once its phase has ended (opened,
-- expired, or followed by another TrySetCount) changes nothing, however
-- late. Within the phase, the first copy to count records its id with the
-- count it left, and every later copy answers that and counts nothing;
-- the record lives as long as the phase's keys. A phase's id is random and
-- new at each TrySetCount, so an ended phase never comes back. The calls
-- of the phase that ended are kept beside the new phase (KEYS[3]): a copy
-- of a call of that phase is told whether the call counted there ('done')
-- or not ('moved', and only then may the client make it again, with the
-- same id, in the new phase). The client's side is in latch.go.
local cur = redis.call('HGET', KEYS[2], '@p')
local phase = cur or ''
local c = tonumber(redis.call('GET', KEYS[1]))
if ARGV[2] == phase then
  local done = redis.call('HGET', KEYS[2], 'n:' .. ARGV[1])
  if done then
    return {'done', tonumber(done), phase}
  end
  if not c then
    return {'done', 0, phase}
  end
  if ARGV[3] ~= '' and redis.call('HEXISTS', KEYS[2], 'o:' .. ARGV[3]) == 1 then
    return {'done', c, phase}
  end
  c = math.max(redis.call('DECR', KEYS[1]), 0)
  redis.call('HSET', KEYS[2], '@p', phase, 'n:' .. ARGV[1], c)
  if ARGV[3] ~= '' then
    redis.call('HSET', KEYS[2], 'o:' .. ARGV[3], 1)
  end
  if not cur then -- a latch set by an older dlock: its calls live as long
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl > 0 then
      redis.call('PEXPIRE', KEYS[2], ttl)
    end
  end
  if c == 0 then
    redis.call('DEL', KEYS[1])
    publish(ARGV[5], ARGV[4], WAKE_ALL)
  end
  return {'done', c, phase}
end
if ARGV[2] ~= '?' and redis.call('HGET', KEYS[3], '@p') == ARGV[2] then
  local done = redis.call('HGET', KEYS[3], 'n:' .. ARGV[1])
  if done then
    return {'done', tonumber(done), phase}
  end
  return {'moved', c or 0, phase}
end
if ARGV[2] == '?' then
  return {'moved', c or 0, phase}
end
return {'unsure', c or 0, phase}
