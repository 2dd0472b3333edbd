-- lib_queue.lua: waiters registered in Redis, and directed wake-ups. Not a
-- script by itself: it is put in front of the scripts that use it when they
-- are loaded, after lib.lua.
--
-- A waiter is a member '<client id>:<token>[:<permits>]'. The waiters of a
-- lock are two sorted sets with the same members:
--   queue  score = arrival number: above every waiter's in the queue
--          when the waiter came; the order of the waiters. It is the
--          server's time in µs where that is above the last waiter's (so
--          that an inspector can read when a waiter came), else the last
--          waiter's plus one: the order never depends on the server's
--          clock — one that stands still or steps back does not put a
--          later arrival first; it only makes the label less true.
--   alive  score = when the waiter's place expires (server ms); a waiter
--          renews it by trying again; one that stops (killed, gave up
--          without saying so) is dropped by the next script to look.
-- The arrival numbers live in the queue itself, so they go with it: no
-- key of their own outlives the lock (a queue that empties starts again
-- from the clock, which orders nobody wrongly: nobody is left to order).
-- Nothing about a waiter is named by the server's clock; only expiries
-- (places', holds') are counted by it, as Redis counts a key's TTL.
-- A waiter is woken by a message, its member, published on its client's
-- own channel: <base><client id>, where base is given by the caller (on a
-- cluster it carries the lock's hash tag, so that it lives in its slot).
-- Nobody else is sent anything.

-- First the helpers that every family shares: here rather than in lib.lua,
-- so that a script's common case, which runs before them, does not pay for
-- making them.

-- clock is the server's clock as TIME gives it (seconds, microseconds:
-- two strings), read once per script run: a script is one instant, which
-- nothing interleaves (Redis itself counts keys' TTLs from one time per
-- script), and each TIME is a redis.call. A release that hands its lock
-- on read it twice (the receipt, then the first waiter's place), an
-- acquire that takes a place twice (the place's expiry, its arrival).
local clock_s, clock_us
local function clock()
  if not clock_s then
    local t = redis.call('TIME')
    clock_s, clock_us = t[1], t[2]
  end
  return clock_s, clock_us
end

-- now_ms is the server's time in milliseconds.
local function now_ms()
  local s, us = clock()
  return tonumber(s) * 1000 + math.floor(tonumber(us) / 1000)
end

-- int is n, a whole number, as the decimal string Redis would be sent:
-- a number given to redis.call (or joined with ..) is printed as a
-- double (%.17g, %.14g), several thousand instructions of the server's
-- each; as an integer it is a fraction of that. Every place in a queue,
-- receipt and hold's time is a whole number of ms or µs, below 2^53.
local function int(n)
  return string.format('%d', n)
end

-- stretch makes key live at least ttl ms more: its expiry only grows. It
-- sets the expiry exactly where PTTL < ttl would (the key has none, or
-- one that ends sooner), in one call where it can: Redis 7's PEXPIRE NX
-- sets one only on a key without, GT only on a key whose expiry ends
-- sooner (GT counts a key without one as never expiring), so exactly one
-- of them can set it, and trying one, then the other when the first set
-- nothing, is the same as asking PTTL first. new says which to try first:
-- NX where the caller has just made the key (a queue it found empty), GT
-- elsewhere (a key that lives with an expiry: a lock, a set of places or
-- receipts in use). A server before Redis 7 refuses both options: there
-- it asks PTTL, then PEXPIREs.
local function stretch(key, ttl, new)
  local first, second = 'GT', 'NX'
  if new then
    first, second = 'NX', 'GT'
  end
  local r = redis.pcall('PEXPIRE', key, ttl, first)
  if r == 0 then
    r = redis.pcall('PEXPIRE', key, ttl, second)
  end
  if type(r) == 'table' then -- refused: a server before Redis 7
    if redis.call('PTTL', key) < tonumber(ttl) then
      redis.call('PEXPIRE', key, ttl)
    end
  end
end

-- The ledger. A lock's dead set holds every mark on its tokens, member
-- -> until when it counts (server ms); docs/how-it-works.md, "Marks",
-- keeps the table of who writes each, for how long, who reads it and
-- what it answers:
--   <token>           refused: no acquire of token takes anything from
--                     now on (every acquire script asks first). Left by a
--                     burial (bury.lua: an acquire given up on, or a lease
--                     whose acquire was slow, before its final release)
--                     and by a release's receipt (below).
--   rel:<token>       released: token's final release ran. Only that
--                     release writes it, so a copy of it sent again that
--                     finds it answers done, truly (sent_again). A burial
--                     is not a release: it never writes it.
--   force:<id>:<had>  a ForceUnlock ran and answered had (forced_before).
-- Owner tokens are hex, so the three never share a member. A mark is never
-- shortened by a later one (mark: ZADD GT): a receipt for a lease's TTL
-- written after that lease's burial, for twice the longest TTL, leaves the
-- burial as long as it was (issue 45: it cut it to the TTL, and the next
-- mark's sweep then dropped it while the acquire's late copy could still
-- land).

-- Why the ledger cannot grant twice, nor hide a loss: a mark never makes
-- a script take or free anything. refused only stops an acquire (every
-- acquire script asks it before it changes anything), and GT only makes a
-- refusal last longer, so an acquire the ledger refused once it refuses
-- until the mark's time at least; released and a force's mark are read
-- only by a final release that found no hold of its token, or by a
-- ForceUnlock's copy, which then change nothing whatever they answer.
-- What the split of released from refused changes is an answer: a
-- release whose hold is gone says done on its own release's mark (or, a
-- mutex's, on a fence counter nobody moved: unlock.lua), never because
-- its lease buried its token (issue 45: a forced lease's Unlock said nil
-- after another owner had held the lock). And GT is what "Acquires sent
-- twice" (internal/acquisition/acquisition.go) assumes of a burial: that it
-- refuses the token's late copies for as long as it was asked to, so
-- that a copy later still takes what it takes for its own TTL at most;
-- the receipt that shortened it broke that, and a copy landing between
-- the receipt's time and the burial's held the lock for nobody.

-- mark leaves member m1 (and m2, if given) in dead for ttl ms at least:
-- a member already there until later keeps its time (ZADD GT updates only
-- to a greater score, and adds a member that is missing, since Redis 6.2;
-- before it, which refuses GT, ZSCORE then ZADD where it is sooner).
-- Entries whose time is past are dropped first: the key lives as long as
-- its latest entry, so on a lock handed on without a pause it never
-- expires, and every mark would stay in it (600 hand-offs a second grew
-- it by 600 members a second, forever). An entry is dropped only when
-- past its own time, which is when it stops counting.
local function mark(dead, ttl, m1, m2)
  local now = now_ms()
  local till = now + tonumber(ttl)
  redis.call('ZREMRANGEBYSCORE', dead, '-inf', int(now))
  local r
  if m2 then
    r = redis.pcall('ZADD', dead, 'GT', int(till), m1, int(till), m2)
  else
    r = redis.pcall('ZADD', dead, 'GT', int(till), m1)
  end
  if type(r) == 'table' then -- refused: a server before Redis 6.2
    for _, m in ipairs({m1, m2}) do
      local had = redis.call('ZSCORE', dead, m)
      if not had or tonumber(had) < till then
        redis.call('ZADD', dead, int(till), m)
      end
    end
  end
  stretch(dead, ttl)
end

-- receipt leaves, for ttl ms (the lease's TTL), the marks of token's
-- final release: released (a copy of the release sent again answers
-- done) and refused (a late copy of its acquire takes nothing).
local function receipt(dead, token, ttl)
  mark(dead, ttl, token, 'rel:' .. token)
end

-- sent_again answers a final release that finds no hold: true when ttl
-- (the receipt's TTL; nil: no receipt asked) is given and dead holds
-- token's release mark, i.e. this release ran before and this is a
-- copy. token's burial alone (refused, no release mark) is false: the
-- hold was lost before the release (expired, forced), and another owner
-- may have taken the lock since.
local function sent_again(dead, token, ttl)
  return ttl ~= nil and redis.call('ZSCORE', dead, 'rel:' .. token) ~= false
end

-- forced_before answers a ForceUnlock (force.lua, rw_force.lua,
-- sem_force.lua, latch_open.lua) sent again: a client library sends a
-- call again when it lost the reply, and the server may run both copies,
-- with another owner taking the freed lock between them. The first copy
-- leaves its receipt, 'force:<id>:<reply>', in the lock's dead set (owner
-- tokens are hex: no acquire is refused for it; forced leaves it), and a
-- copy that finds it changes nothing and answers the same reply: one
-- ForceUnlock ends the holds it found, never the next owner's
-- (forceReceipt in inspect.go). It returns that reply, or nil for a
-- first copy.
local function forced_before(dead, id)
  for _, had in ipairs({1, 0}) do
    if redis.call('ZSCORE', dead, 'force:' .. id .. ':' .. had) then
      return had
    end
  end
  return nil
end

-- forced leaves the receipt of a ForceUnlock that ran (forced_before),
-- for ttl ms, and returns its reply, had.
local function forced(dead, id, had, ttl)
  mark(dead, ttl, 'force:' .. id .. ':' .. had)
  return had
end

-- in_order puts a command of one hold in the hold's sequence (internal/hold/hold.go,
-- "Late commands"): every command that changes a hold after it was taken
-- (renewal, Extend, re-entry, an inner unlock, Proclaim) carries seq, one
-- more than the hold's previous command, and the hash keeps the highest
-- that ran in 'q:<tok>'. It returns 'run' (seq is recorded: go on),
-- 'again' (this very command ran already: a copy sent again; answer as
-- done, change nothing) or 'stale' (a later command of the hold ran
-- first: change nothing, answer STALE). The caller has checked that the
-- hold is there; 'q:<tok>' goes with it.
local function in_order(hash, tok, seq)
  local q, s = tonumber(redis.call('HGET', hash, 'q:' .. tok) or '0'), tonumber(seq)
  if s > q then
    redis.call('HSET', hash, 'q:' .. tok, seq)
    return 'run'
  elseif s == q then
    return 'again'
  end
  return 'stale'
end

-- set_count sets field (an owner token, or a side and a token) of tok's
-- hold to the hold count n, in the hold's sequence: a re-entry or an inner
-- unlock. It returns NOT_HELD when the hold is gone, STALE when a later
-- command of the hold ran first, else what in_order said ('run': set;
-- 'again': a copy of the call that set it).
local function set_count(hash, field, tok, n, seq)
  if redis.call('HEXISTS', hash, field) == 0 then
    return NOT_HELD
  end
  local order = in_order(hash, tok, seq)
  if order == 'stale' then
    return STALE
  elseif order == 'run' then
    redis.call('HSET', hash, field, n)
  end
  return order
end

-- Fences are returned exactly. Lua numbers are doubles, exact only below
-- 2^53, so a counter at or past that is read back as the string Redis
-- stores (Go parses either). Never do arithmetic on a fence here.

-- next_fence INCRs the fence counter at key and returns the new value,
-- the fence of a hold that is taken. The counter is not the lock's own:
-- every lock of a cluster slot shares one (every lock of the deployment,
-- off a cluster; internal/protocol/doc.go, "Fence counters"), so that the keys that stay
-- forever are one per slot, not one per name ever used. A lock's fences
-- still only grow, forever: each is the shared counter's next value, and
-- the counter never goes down (it never expires; a restart keeps it as
-- far as persistence does, as it kept a lock's own). A hold keeps its
-- fence in its lock's key (a mutex's hold string, lib_mutex.lua; or
-- 'f:<token>' in an RWMutex's or Semaphore's hash), where a re-entry and
-- an inspector read it.
local function next_fence(key)
  local f = redis.call('INCR', key)
  if f >= 9007199254740992 then
    return redis.call('GET', key)
  end
  return f
end

-- dequeue removes member from a lock's queue if it is there (one call if
-- not).
local function dequeue(queue, alive, member)
  if member ~= '' and redis.call('ZREM', queue, member) == 1 then
    redis.call('ZREM', alive, member)
  end
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

-- head returns the first waiter, or nil.
local function head(queue)
  return redis.call('ZRANGE', queue, 0, 0)[1]
end

-- first_live returns the first live waiter (nil if none), the server
-- time and when that waiter's place expires. Dead waiters are dropped
-- when they come first. It costs one call when nobody waits, three when
-- the first is alive; one less when the caller has just read the head
-- of the queue itself and gives it as known (in this same script, which
-- nothing interleaves, with no change to the queue since).
local function first_live(queue, alive, known)
  local h = known or head(queue)
  if not h then
    return nil, nil, nil
  end
  local now = now_ms()
  local exp = tonumber(redis.call('ZSCORE', alive, h))
  if exp and exp > now then
    return h, now, exp
  end
  purge(queue, alive, now)
  h = head(queue)
  if h then
    exp = tonumber(redis.call('ZSCORE', alive, h))
  end
  return h, now, exp
end

-- place enters member in the queue if it is not there, last (its arrival
-- number above the last waiter's: see the queue above), and renews its
-- place for place_ttl ms. fresh says that the caller had no place before
-- this call (no earlier attempt of its acquire carried member): then only
-- a copy of this very call, sent again, can have placed it, and ZADD NX
-- keeps that copy's arrival without asking first (one call less).
--
-- Both sets live at least as long as their longest place: their expiry
-- only grows (stretch). Waiters choose their own place TTL (WithQueueTTL),
-- so a place renewed later may end sooner than one made before it; were
-- the keys' expiry set to the latest place's, a waiter with a short one
-- would take every earlier waiter's place, and its arrival number, with
-- the keys (issue 23). A key that outlives every place holds only dead
-- members, which the next script to look drops (purge, first_live).
local function place(queue, alive, member, now, place_ttl, fresh)
  local new = false
  if fresh or not redis.call('ZSCORE', queue, member) then
    -- Scores are doubles, exact below 2^53 (µs: until the year 2255).
    local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')[2]
    new = not last
    local s, us = clock()
    redis.call('ZADD', queue, 'NX', int(math.max(tonumber(last or 0) + 1, tonumber(s) * 1000000 + tonumber(us))), member)
  end
  redis.call('ZADD', alive, int(now + place_ttl), member)
  -- The queue lives as long as its longest place, whatever mix of place
  -- TTLs its waiters use: a waiter with a short one must not take the
  -- places (and arrival numbers) of those before it with the keys. (new:
  -- the queue was empty, so most likely both keys are new; a guess, which
  -- only decides which of stretch's two calls comes first.)
  stretch(queue, place_ttl, new)
  stretch(alive, place_ttl, new)
end

-- unqueue removes member from the queue.
local function unqueue(queue, alive, member)
  redis.call('ZREM', queue, member)
  redis.call('ZREM', alive, member)
end

-- tell wakes one waiter: its member, on its client's channel (a refused
-- publish is kept, not raised: see publish in lib.lua).
local function tell(member, base, pub)
  publish(pub, base .. string.match(member, '^[^:]*'), member)
end

-- call_next tells the first live waiter that it is its turn; it returns
-- that waiter (or nil) and the server time.
local function call_next(queue, alive, base, pub)
  local h, now = first_live(queue, alive)
  if h then
    tell(h, base, pub)
  end
  return h, now
end
