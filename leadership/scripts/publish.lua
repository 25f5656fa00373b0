-- Publish the identity record of a term, where its lock is held.
-- KEYS[1] the lock key, KEYS[2] the record key. ARGV[1] the lock's token, ARGV[2] the record.
-- Returns 1 if the lock key held the token (the record is stored and announced), 0 otherwise:
-- a master where another holder has the key must not name us.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('PUBLISH', KEYS[2], ARGV[2])
return 1
