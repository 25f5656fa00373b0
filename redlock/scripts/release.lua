-- Compare-and-delete: remove the lock key only while it still holds our token, and then tell
-- waiters: PUBLISH on a channel named like the key, with our token as the message, so that a
-- waiter can tell the holder's release from another loser's cleanup.
-- KEYS[1] lock key, ARGV[1] token. Returns 1 if deleted, 0 if the key was gone or held another token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[1], ARGV[1])
  return 1
end
return 0
