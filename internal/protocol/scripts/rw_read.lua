-- rw_read.lua: take or re-enter a read hold of the read-write lock.
--
-- KEYS[1]  (go: Lock) lock hash (see lib_rw.lua)
-- KEYS[2]  (go: Fence) fence counter (never expires)
-- KEYS[3]  (go: Readers) readers: token -> hold expiry (server ms)
-- KEYS[4]  (go: Queue) writers' queue
-- KEYS[5]  (go: Alive) writers' places (see lib_queue.lua)
-- KEYS[6]  (go: RQueue) waiting readers: member -> place expiry (server ms)
-- KEYS[7]  (go: RPhase) admitted readers (a read phase): member -> place
--          expiry (server ms)
-- KEYS[8]  (go: Dead) dead: tokens whose acquire was given up on (bury.lua)
-- ARGV[1]  (go: Token) owner token: every read hold has its own, a read
--          inside a write hold too
-- ARGV[2]  (go: TTL) lease TTL in milliseconds
-- ARGV[3]  (go: Count) 0 to acquire; n >= 2 to re-enter, setting the hold
--          count to n
-- ARGV[4]  (go: Readers) '1' to let readers in while writers wait (reader
--          preference)
-- ARGV[5]  (go: Member) the waiter's member ('<client id>:<token>'); '' for
--          none
-- ARGV[6]  (go: PlaceTTL) place TTL in milliseconds; 0 to take no place
--          (TryRLock)
-- ARGV[7]  (go: Parent) the token of the caller's own write hold, to read
--          inside it ('' for none)
-- ARGV[8]  (go: Seq, if Reentry) re-entry only: its place in the hold's
--          sequence (in_order in lib_queue.lua)
--
-- A waiting writer keeps new readers out, but not those that a writer's
-- release admitted (lib_rw.lua): they go before the next writer.
--
-- Returns  {1, fence}  held (idempotent: a retried acquire answers the same)
--          {0, wait}   not now: try again within wait ms at the latest
--          {-1}        re-entry asked for, but the caller holds nothing;
--                      or an attempt of an acquire given up on (bury.lua)
--          {-4}        STALE: a re-entry older than a command of the hold
--                      that ran; nothing changed
--
-- A read inside a write hold is a hold of its own (its own token, its own
-- 'r:' field and expiry, its own fence): releasing or undoing
-- it, or another read inside the same write, never touches the others.
-- Why it cannot let a reader in beside another owner's write: it is
-- granted in 'write' mode only when 'w:<ARGV[7]>' is in the hash, that
-- is, while the write hold it reads inside is the one that holds.
local lock, fence, readers, queue, alive, rqueue, rphase = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local tok, ttl, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local member, place_ttl = ARGV[5], tonumber(ARGV[6])
if ARGV[4] == '1' and member ~= '' then
  member = member .. ':p'
end
local r = 'r:' .. tok
if redis.call('ZSCORE', KEYS[8], ARGV[1]) then
  return {NOT_HELD} -- a late attempt of an acquire given up on
end
local now = now_ms()
expire_readers(lock, readers, now)

-- lengthen makes the reader's hold last at least ttl more (a renewal
-- never shortens what an Extend lengthened).
local function lengthen()
  if now + ttl > tonumber(redis.call('ZSCORE', readers, tok) or '0') then
    redis.call('ZADD', readers, now + ttl, tok)
  end
  stretch(lock, ttl)
  stretch(readers, ttl)
end

if count > 0 then
  local res = set_count(lock, r, tok, count, ARGV[8])
  if res == NOT_HELD or res == STALE then
    return {res}
  elseif res == 'run' then
    lengthen()
  end
  return {HELD, redis.call('HGET', lock, 'f:' .. tok)}
end

-- wait keeps the reader's place (a Lock's attempt) and returns {BUSY, wait}.
local function wait(ms)
  if place_ttl > 0 then
    redis.call('ZADD', rqueue, now + place_ttl, member)
    stretch(rqueue, place_ttl)
  end
  return {BUSY, ms}
end

local function take(f)
  if member ~= '' then
    redis.call('ZREM', rqueue, member)
    redis.call('ZREM', rphase, member)
  end
  redis.call('HSET', lock, r, 1, 'f:' .. tok, f, 't:' .. tok, now)
  if not redis.call('HGET', lock, 'mode') then
    redis.call('HSET', lock, 'mode', 'read')
  end
  redis.call('ZADD', readers, now + ttl, tok)
  stretch(lock, ttl)
  stretch(readers, ttl)
  return {HELD, f}
end

if redis.call('HEXISTS', lock, r) == 1 then
  -- this acquire, sent again (go-redis resends a call whose reply it
  -- lost; a copy may arrive late): it holds already, and a re-entry may
  -- have set its count since, so nothing is reset
  if member ~= '' then
    redis.call('ZREM', rqueue, member)
    redis.call('ZREM', rphase, member)
  end
  lengthen()
  return {HELD, redis.call('HGET', lock, 'f:' .. tok)}
end
local mode = redis.call('HGET', lock, 'mode')
if mode == 'write' then
  local parent = ARGV[7]
  if parent ~= '' and redis.call('HEXISTS', lock, 'w:' .. parent) == 1 then
    -- a writer reading inside its own write hold: a hold of its own, with
    -- a fence of its own
    return take(next_fence(fence))
  end
  return wait(math.max(redis.call('PTTL', lock), 0))
end
purge(queue, alive, now)
local first = head(queue)
local function admitted()
  return member ~= '' and tonumber(redis.call('ZSCORE', rphase, member) or '0') > now
end
if first and ARGV[4] ~= '1' and not admitted() then
  -- a writer waits: new readers queue behind it, until the writer has had
  -- its turn or its place expires
  local ms = tonumber(redis.call('ZSCORE', alive, first)) - now
  if mode == 'read' then
    ms = math.min(ms, math.max(redis.call('PTTL', lock), 0))
  end
  return wait(ms)
end
return take(next_fence(fence))
