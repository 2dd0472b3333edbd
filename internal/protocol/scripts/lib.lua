-- lib.lua: what every script shares. Not a script by itself: it is put in
-- front of every script when it is loaded (see script.go).
--
-- It runs at every call of every script, before a script's common case
-- (see "-- @helpers" in script.go), and each function it defines is made
-- anew each time (some 500 instructions of the server apiece, measured
-- with callgrind): so it holds the protocol's names and publish only. The
-- other shared helpers are in lib_queue.lua, which the families put
-- behind their common case.

-- The protocol between the scripts and Go. protocol.go names the same
-- values, and a test checks that both say the same.
--
-- Reply codes (first element of an array reply, or the whole reply):
local HELD = 1          -- {1, fence} acquired or re-entered; 1 released or renewed
local BUSY = 0          -- {0, pttl} held by another owner; 0 renewal found nothing
local NOT_HELD = -1     -- {-1} or -1: the caller holds nothing
local TOO_MANY = -2     -- {-2, capacity} a semaphore request above its capacity
local TTL_NOT_HELD = -3 -- ttl scripts: the caller holds nothing
local STALE = -4        -- {-4} or -4: a later command of the same hold ran
                        -- first; this one changed nothing (see in_order)
local SLOW = -5         -- -5: a fast script (lock_fast.lua, unlock_fast.lua)
                        -- found its common case does not hold; it changed
                        -- nothing, and the full script is to run instead
-- Wake message published on a lock's channel (a latch, an RWMutex's
-- readers); a waiter whose turn it is is told on its client's own channel
-- (lib_queue.lua):
local WAKE_ALL = 'all'   -- wake every waiter

-- publish sends msg on channel with pub (PUBLISH or SPUBLISH). Every
-- script publishes through it, after its writes: a refused publish (an ACL
-- user without the channel: Redis 7 grants none by default) must not fail
-- the script, whose writes stand (Redis does not roll them back), so it is
-- run with pcall and its error kept in refused. A script that may publish
-- is wrapped when it is loaded (script.go): when refused is set, its reply
-- R comes back as {REFUSED, error, R}, and Go unwraps it.
local REFUSED = 'dlock:refused'
local refused = false
local function publish(pub, channel, msg)
  local r = redis.pcall(pub, channel, msg)
  if type(r) == 'table' and r.err then
    refused = r.err
  end
end
