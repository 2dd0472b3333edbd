-- unlock.lua: release holds of the reentrant mutex (Mutex or FairMutex);
-- when it becomes free, hand it to the first waiter (lib_mutex.lua).
--
-- KEYS[1]  (go: Lock) lock: the hold, one string (lib_mutex.lua)
-- KEYS[2]  (go: Fence) the fence counter of the lock's slot (for a waiter
--          handed the lock)
-- KEYS[3]  (go: Queue) queue
-- KEYS[4]  (go: Alive) alive (see lib_queue.lua)
-- ARGV[1]  (go: Token) owner token
-- ARGV[2]  (go: Left) holds to leave: n >= 1 keeps the lock with count n; 0
--          frees it
-- ARGV[3]  (go: Wake) channel base
-- ARGV[4]  (go: Wake) publish command (PUBLISH or SPUBLISH)
-- ARGV[5]  (go: Reserve) '1' to hand the lock to the waiter told, or keep it
--          for it (not on a quorum)
-- ARGV[6]  (go: Observers) an Election's observers' channel, told 'all' when
--          its leader resigns ('' for a mutex)
-- ARGV[7]  (go: Seq) n >= 1 only: the call's place in the hold's sequence
--          (in_order in lib_queue.lua): a late inner unlock changes nothing
-- ARGV[8]  (go: Fence, if Free) n = 0, optional: the hold's fence
-- ARGV[9]  (go: ReceiptTTL, if Free) its lease TTL in
--          milliseconds: the release answers done, not -1, when it is
--          sent again after it ran (see "Sent again" below)
-- KEYS[5]  (go: Dead) dead: the lock's ledger of marks (lib_queue.lua):
--          tokens that must not take the lock again (bury.lua); a release
--          that hands the lock on leaves its receipt there
--
-- Returns  1   done
--          -1  the caller holds nothing: its lease was lost, or never held
--          -4  STALE (n >= 1): a later command of the hold ran; nothing changed
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
--
-- Idempotent: the count is set, not subtracted from, so a retried call
-- changes nothing more.
--
-- Sent again: go-redis sends a call again when it lost the reply, and the
-- server may run both copies; the second finds the hold gone. It answers
-- done (1), not -1, when nobody can have held the lock since this hold:
-- the fence counter is still the hold's fence (every grant of every lock
-- that shares the counter INCRs it, so none was made since), or
-- the dead set holds the token's release mark, 'rel:<token>', which a
-- release that handed the lock on (which INCRs the fence for the next
-- owner) left. The token's burial alone is not that mark (a lease whose
-- acquire was slow buries its token before its release, and that release
-- may find its hold forced away). Else -1: the hold
-- was lost before the release (expired, forced, lost with a failover),
-- and another owner may have taken the lock. Since the counter is shared
-- (internal/protocol/doc.go, "Fence counters"), a grant of another lock between the two
-- copies also makes it -1: a copy sent again on a busy server may report
-- a release that ran as lost (never the reverse; a receipt on every
-- release would tell them apart at the cost of a sorted-set write each).
--
-- The common case, before the helpers: the last hold is released and
-- nobody waits. It reads the key and deletes it when the caller's token
-- holds it. The key holds one hold or RESERVED and a member, never two
-- owners (lib_mutex.lua, "Why one string cannot hold two owners"), so
-- when the token read is the caller's, the caller held the lock and DEL
-- frees it; when it is not, the caller held nothing and nothing changed.
-- The hold's label and value go with it: they are part of the string.
-- (Go sends the count as a decimal integer, so '0' is the only way it
-- says 0.)
local first -- the first waiter, when the common case below has read it
if ARGV[2] == '0' then
  local v = redis.call('GET', KEYS[1])
  if not v or string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
    if ARGV[8] and (redis.call('GET', KEYS[2]) == ARGV[8] or redis.call('ZSCORE', KEYS[5], 'rel:' .. ARGV[1])) then
      return 1 -- this release, sent again: it ran
    end
    return NOT_HELD
  end
  redis.call('DEL', KEYS[1])
  -- Whether anybody waits, and who comes first: one call serves both.
  if ARGV[6] == '' then
    first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if not first then
      return 1 -- nobody waits
    end
  end
end
-- @helpers
if ARGV[2] ~= '0' then
  local r = mutex_count(KEYS[1], ARGV[1], ARGV[2], ARGV[7])
  if r == NOT_HELD or r == STALE then
    return r
  end
  return 1
end
-- Waiters are registered (or an Election's observers are to be told):
-- the key is gone (DEL above); hand the lock on.
if ARGV[8] then
  -- the receipt: the hand-off below INCRs the fence
  receipt(KEYS[5], ARGV[1], ARGV[9])
end
hand_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[4], ARGV[5] == '1', ARGV[1], first)
if ARGV[6] ~= '' then
  -- an Election's leader resigned: its observers read who leads now
  publish(ARGV[4], ARGV[6], WAKE_ALL)
end
return 1
