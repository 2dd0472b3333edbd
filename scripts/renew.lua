-- renew.lua: extend the lease of a hold the caller still owns.
--
-- KEYS[1]  lock hash: owner token -> hold count
-- ARGV[1]  owner token
-- ARGV[2]  new lease TTL in milliseconds
--
-- Returns  1  renewed
--          0  the caller holds nothing (the key expired, was deleted or
--             belongs to another owner): the lease is lost
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
