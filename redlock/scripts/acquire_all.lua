-- All-or-nothing SET NX PX over several lock keys: every key is set to our token, or none is.
-- KEYS the lock keys, ARGV[1] token, ARGV[2] TTL in ms.
-- Returns 1 if every key was absent and is now ours, 0 if any existed (then nothing changed).
for _, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then
    return 0
  end
end
for _, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
end
return 1
