-- renew.lua: extend the lease of a hold the caller still owns.
--
-- KEYS[1]  lock hash: owner token -> hold count
-- ARGV[1]  owner token
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  '1' to set the TTL to exactly ARGV[2] (Extend); '0' to make it
--          at least ARGV[2] (a watchdog renewal: one still in flight when
--          Extend lengthened the lease must not shorten it again)
--
-- Returns  1  renewed
--          0  the caller holds nothing (the key expired, was deleted or
--             belongs to another owner): the lease is lost
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
-- (stretch in lib_queue.lua, written out: this script has no helpers)
if ARGV[3] == '1' or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
