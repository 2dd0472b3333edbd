-- label.lua: record a hold's label (WithLabel) beside its other fields,
-- once its acquire has granted it.
--
-- KEYS[1]  (go: Lock) the lock's hash (a Mutex's, FairMutex's, Election's,
--          RWMutex's, or a Semaphore's holders)
-- ARGV[1]  (go: Token) the hold's owner token
-- ARGV[2]  (go: Label) the label (any bytes, at most 256: WithLabel)
--
-- Returns  1  recorded
--          0  the token holds nothing here (released, expired, forced
--             before this call ran): nothing written
--
-- The label is 'l:<token>' in the hash that keeps the hold, beside
-- 'f:<token>' (its fence), which every kind of hold has for as long as it
-- holds and which every script that ends a hold deletes in the same HDEL
-- as 'l:<token>' (unlock.lua, unlock_fast.lua, lib_rw.lua's
-- forget_reader, rw_unlock.lua, lib_sem.lua's drop), or with the whole
-- key (a DEL, a force, the key's expiry). So the label is renewed, and
-- deleted, with the hold; and a copy of this call that runs late (after
-- the hold ended) finds no 'f:<token>' and writes nothing: no label
-- outlives its hold.
--
-- Why this cannot grant twice, nor change who holds: it writes one
-- field, 'l:<token>', into a hash that exists and holds the token. No
-- script reads 'l:' fields to decide anything; a mutex's release deletes
-- it with the hold's other fields in its one HDEL, so "HDEL removing
-- anything leaves the hash empty" (unlock.lua) still holds; it changes no
-- count, mode, fence, TTL or queue.
if redis.call('HEXISTS', KEYS[1], 'f:' .. ARGV[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'l:' .. ARGV[1], ARGV[2])
return 1
