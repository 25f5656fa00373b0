-- The release that only a fair client sends (handoff.go), on one lock key KEYS[1]:
-- ARGV[1] our token; ARGV[2] the id of a queued waiter of our own client, or '' for none; ARGV[3]
-- its new token; ARGV[4] its TTL in ms; ARGV[5], ARGV[6], ...: entries to remove from the queue
-- first (waiters of our client that took the lock in-process and left their entries behind, as
-- drop_entries reads them; a key handed to one of them is released first).
-- When ARGV[2] is the queue's head and the key held our token or was free for the head (absent, or
-- the reservation, as fair_lock.lua would take it), the key is set to its token at once and its
-- entry removed; the waiter is told in-process. When the key held our token, the release is still
-- published, naming the head, so that a waiter of another client that sleeps on our token wakes
-- and reads the new holder. Otherwise it is the release of every client (release_key).
-- Returns 2 if the key held our token and was handed over, 3 if it was free and handed over, and
-- else release_key's 1 (released) or 0 (not ours).
local key, token, to = KEYS[1], ARGV[1], ARGV[2]
local q, e, h = queue_of(key)
if not q then
  return release_key(key, token)
end
if drop_entries(q, e, h, redis.call('GET', key), 5) then
  release_key(key, redis.call('GET', key))
end
if to == '' then
  return release_key(key, token)
end
local v = redis.call('GET', key)
local ours = v == token
if not ours and v and v ~= 'q' then
  return 0
end
expire_entries(q, e, h, now_ms())
if redis.call('ZRANGE', q, 0, 0)[1] ~= to then
  return release_key(key, token)
end
redis.call('SET', key, ARGV[3], 'PX', ARGV[4])
drop(q, e, h, to)
if ours then
  redis.call('PUBLISH', key, token .. '/' .. to)
  return 2
end
return 3
