-- owner.lua: record (or, with no fields, forget) who a Client is, for
-- inspectors: host, pid, program, label, started. Owner tokens start with
-- the Client's id, which names this key.
--
-- KEYS[1]  (go: Client) <prefix>:client:<client id>
-- ARGV[1]  (go: TTL) TTL in milliseconds
-- ARGV[2..] (go: Fields) field, value, ...
--
-- Returns  1
if #ARGV < 2 then
  redis.call('DEL', KEYS[1])
  return 1
end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
