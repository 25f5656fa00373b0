-- Compare-and-pexpire: give the lock key a new TTL only while it still holds our token.
-- A key that expired is not brought back. KEYS[1] lock key, ARGV[1] token, ARGV[2] TTL in ms.
-- Returns 1 if the TTL was set, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
