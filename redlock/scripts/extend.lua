-- Compare-and-pexpire: give the lock keys a new TTL only while every one still holds our token.
-- A key that expired is not brought back. KEYS the lock keys, ARGV[1] token, ARGV[2] TTL in ms.
-- Returns 1 if the TTLs were set, 0 otherwise (and then nothing changed).
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) ~= ARGV[1] then
    return 0
  end
end
for _, key in ipairs(KEYS) do
  redis.call('PEXPIRE', key, ARGV[2])
end
return 1
