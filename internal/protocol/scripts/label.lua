-- label.lua: record a hold's label (WithLabel) beside its other fields,
-- once its acquire has granted it.
--
-- KEYS[1]  (go: Lock) the lock's key: a mutex's hold (a Mutex's, FairMutex's,
--          Election's), or the hash of an RWMutex's or a Semaphore's holders
-- ARGV[1]  (go: Token) the hold's owner token
-- ARGV[2]  (go: Label) the label (any bytes, at most 256: WithLabel)
--
-- Returns  1  recorded
--          0  the token holds nothing here (released, expired, forced
--             before this call ran): nothing written
--
-- A mutex's hold (a Mutex's, FairMutex's, Election's: one string, see
-- lib_mutex.lua) keeps its label in the string, after its length; the
-- other kinds keep it as 'l:<token>' in the hash that keeps the hold,
-- beside 'f:<token>' (its fence), which every such hold has for as long
-- as it holds and which every script that ends one deletes in the same
-- HDEL as 'l:<token>' (lib_rw.lua's forget_reader, rw_unlock.lua,
-- lib_sem.lua's drop), or with the whole key (a DEL, a force, the key's
-- expiry). So the label is renewed, and deleted, with the hold; and a
-- copy of this call that runs late (after the hold ended) finds no hold
-- of the token and writes nothing: no label outlives its hold.
--
-- Why this cannot grant twice, nor change who holds: on a mutex it
-- rewrites the caller's own hold (the token read in this same script)
-- with its expiry kept, changing only the label (the token, fence,
-- stamp, count, sequence and value are written back as read); on a hash
-- it writes one field, 'l:<token>', into a hash that exists and holds the
-- token. No script reads a label to decide anything; it changes no
-- count, mode, fence, TTL or queue.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'string' then
  -- (split in lib_mutex.lua, written out)
  local head, n, has, rest = string.match(v, '^(%S+ %d+ %d+ %d+ %d+) (%d+)(v?) (.*)$')
  if not head or string.sub(head, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
    return 0
  end
  local value = ''
  if has == 'v' then
    value = string.sub(rest, tonumber(n) + 1)
  end
  redis.call('SET', KEYS[1], head .. ' ' .. #ARGV[2] .. has .. ' ' .. ARGV[2] .. value, 'KEEPTTL')
  return 1
elseif not v then
  return 0
end
if redis.call('HEXISTS', KEYS[1], 'f:' .. ARGV[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'l:' .. ARGV[1], ARGV[2])
return 1
