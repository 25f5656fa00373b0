-- Compare-and-delete: remove each lock key only while it still holds our token, and then tell
-- waiters: PUBLISH on a channel named like the key, with our token as the message, so that a
-- waiter can tell the holder's release from another loser's cleanup.
-- KEYS the lock keys (one, or a lock's several resources), ARGV[1] token.
-- Returns 1 if every key held our token (and is now deleted), 0 otherwise.
local all = 1
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('DEL', key)
    redis.call('PUBLISH', key, ARGV[1])
  else
    all = 0
  end
end
return all
