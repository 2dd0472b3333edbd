-- latch_open.lua: open a latch whatever its count (unlock --force); its
-- waiters are woken. The calls its phase remembers are kept (they expire
-- with the latch's TTL): a late copy of a call of this phase still finds
-- them and changes nothing (see latch_down.lua).
--
-- KEYS[1]  (go: Lock) count
-- KEYS[2]  (go: IDs) the ids set of an older dlock's CountDownOnce
-- KEYS[3]  (go: Dead) dead (the lock's <lock>:dead set): where the receipt is
--          left
-- ARGV[1]  (go: Channel) channel
-- ARGV[2]  (go: Publish) publish command (PUBLISH or SPUBLISH)
-- ARGV[3]  (go: ID) the ForceUnlock's id
-- ARGV[4]  (go: ReceiptTTL) its receipt's TTL in ms
--
-- Returns  1 if the latch was closed, 0 if not
--          (when a wake-up was refused, the reply comes wrapped as {REFUSED,
--          error, reply}: see publish in lib.lua; Go unwraps it)
--
-- Sent again: a copy of this call (a client library's re-send after a lost
-- reply) that runs after TrySetCount began a new phase would open that
-- phase too. The first copy leaves 'force:<id>:<reply>' in the dead set;
-- a copy that finds it changes nothing and answers the same reply, as
-- force.lua's (forceReceipt in inspect.go).
local again = forced_before(KEYS[3], ARGV[3])
if again then
  return again -- a copy of a force that ran
end
local had = redis.call('DEL', KEYS[1])
forced(KEYS[3], ARGV[3], had, ARGV[4])
redis.call('DEL', KEYS[2])
publish(ARGV[2], ARGV[1], WAKE_ALL)
return had
