-- lock_all.lua: take several mutexes at once, all or none.
--
-- KEYS[5i-4]  (go: Lock) the i-th mutex's lock: its hold, one string (lib_mutex.lua)
-- KEYS[5i-3]  (go: Fence) the fence counter of its slot (see next_fence in
--             lib_queue.lua)
-- KEYS[5i-2]  (go: Queue) its queue
-- KEYS[5i-1]  (go: Alive) its alive set (see lib_queue.lua)
-- KEYS[5i]    (go: Dead) its dead set: tokens whose acquire was given up on
--             (bury.lua)
-- ARGV[1]     (go: Token) owner token (the same for every mutex of the set)
-- ARGV[2]     (go: Member) the waiter's member; '' to take no place (TryLock)
-- ARGV[3]     (go: PlaceTTL) place TTL in milliseconds; 0 to take no place
-- ARGV[4]     (go: Wake) channel base
-- ARGV[5]     (go: Wake) publish command
-- ARGV[i+5]   (go: TTLs) the i-th mutex's lease TTL in milliseconds
--
-- Returns  {1, fence_1, ..., fence_n}  all held (idempotent: a retried
--                                      call answers the same)
--          {0, i, wait}                the i-th is held by another owner
--                                      (or kept for another waiter): try
--                                      again within wait ms; nothing was
--                                      taken, and the caller waits in the
--                                      i-th's queue only
--          {-1}                        a late attempt of a LockAll given
--                                      up on (bury.lua): nothing changed
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
local tok, member, place_ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local n = #KEYS / 5
local function k(i, j)
  return KEYS[5 * (i - 1) + j]
end
for i = 1, n do
  if redis.call('ZSCORE', k(i, 5), tok) then
    return {NOT_HELD} -- a late attempt of a LockAll given up on
  end
end
local blocked = 0
for i = 1, n do
  local lock = k(i, 1)
  local v = redis.call('GET', lock)
  if v and split(v) ~= tok and v ~= RESERVED .. ' ' .. member then
    blocked = i
    break
  end
end
if blocked > 0 then
  -- wait in the blocked mutex's queue only: give up a place (or a lock
  -- kept for us) anywhere else
  for i = 1, n do
    if i ~= blocked then
      if reserved_for(k(i, 1), member) then
        redis.call('DEL', k(i, 1))
        dequeue(k(i, 3), k(i, 4), member)
        hand_on(k(i, 1), k(i, 2), k(i, 3), k(i, 4), ARGV[4], ARGV[5], true)
      else
        dequeue(k(i, 3), k(i, 4), member)
      end
    end
  end
  local lock = k(blocked, 1)
  if place_ttl > 0 then
    place(k(blocked, 3), k(blocked, 4), member, now_ms(), place_ttl)
  end
  return {BUSY, blocked, math.max(redis.call('PTTL', lock), 0)}
end
local out = {1}
local now = stamp_ms()
for i = 1, n do
  local lock, fence, ttl = k(i, 1), k(i, 2), ARGV[i + 5]
  local f = hold_of(lock, tok)
  if f then
    stretch(lock, ttl) -- sent again: only lengthens
    out[i + 1] = f
  else
    -- free, or kept for us (SET replaces RESERVED)
    f = next_fence(fence)
    redis.call('SET', lock, new_hold(tok, f, now), 'PX', ttl)
    out[i + 1] = f
  end
  dequeue(k(i, 3), k(i, 4), member)
end
return out
