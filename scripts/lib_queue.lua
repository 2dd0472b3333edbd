-- lib_queue.lua: helpers shared by the scripts of queued locks (fair
-- mutex, write side of the read-write lock). Not a script by itself: it is
-- put in front of the scripts that use it when they are loaded, after
-- lib.lua.
--
-- A queue is two sorted sets with the same members, the waiters' tokens:
--   queue  score = arrival time (server µs): the order of the waiters
--   alive  score = when the waiter's place expires (server ms); a waiter
--          renews it by trying again; one that stops (killed, gave up
--          without saying so) is dropped by the next script to look.

-- arrival_us is the server's time in microseconds, as an exact integer
-- string (a Lua number would be printed with only 14 significant digits).
local function arrival_us()
  local t = redis.call('TIME')
  return t[1] .. string.format('%06d', tonumber(t[2]))
end

-- purge drops the waiters whose place has expired; it returns how many.
local function purge(queue, alive, now)
  local dead = redis.call('ZRANGEBYSCORE', alive, '-inf', now)
  for _, d in ipairs(dead) do
    redis.call('ZREM', queue, d)
    redis.call('ZREM', alive, d)
  end
  return #dead
end

-- head returns the first waiter's token, or nil.
local function head(queue)
  return redis.call('ZRANGE', queue, 0, 0)[1]
end

-- place enters token in the queue if it is not there, and renews its
-- place for place_ttl ms. Both sets live as long as their newest place.
local function place(queue, alive, token, now, place_ttl)
  if not redis.call('ZSCORE', queue, token) then
    redis.call('ZADD', queue, arrival_us(), token)
  end
  redis.call('ZADD', alive, now + place_ttl, token)
  redis.call('PEXPIRE', queue, place_ttl)
  redis.call('PEXPIRE', alive, place_ttl)
end

-- unqueue removes token from the queue.
local function unqueue(queue, alive, token)
  redis.call('ZREM', queue, token)
  redis.call('ZREM', alive, token)
end

-- call_next tells the first live waiter that it is its turn, on channel
-- with the publish command pub; the message is its token.
local function call_next(queue, alive, now, channel, pub)
  purge(queue, alive, now)
  local h = head(queue)
  if h then
    redis.call(pub, channel, h)
  end
end
