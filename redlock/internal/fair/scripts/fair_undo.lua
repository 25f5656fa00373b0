-- The undo of a fair waiter's lost attempt (fair_lock.lua), sent instead of release.lua on a master
-- where that attempt took the key. KEYS[1] the lock key, ARGV[1] the attempt's token, ARGV[2] the
-- waiter's id, ARGV[3] its arrival stamp, ARGV[4] its entry's TTL in ms. Where the attempt took the
-- key (as the queue's head, or over a key handed to it), its entry left the queue; it goes back at
-- its stamp before the key is released, so that the waiter keeps its place on every master. Without
-- that, on a master the holder lacks (its own attempt lost there, or the key expired) each waiter's
-- attempt took the free key and left the queue, the queue held whoever had tried last, and a release
-- there handed the key to a later arrival while the other masters reserved it for the earliest: the
-- later one collected a majority first (the simulator, seed 4480757040280684745). When the waiter is
-- the head again, the key is deleted (the waiter's next attempt takes it; waiters behind it queue);
-- otherwise it goes on to the head (queue.lua's release_key).
-- Returns 1 if the key held the token (and is now released), 0 otherwise.
local function requeue(key)
  if redis.call('GET', key) ~= ARGV[1] then
    return false
  end
  local q, e, h = queue_of(key)
  if not q then
    return false
  end
  local now = now_ms()
  local ttl = tonumber(ARGV[4])
  expire_entries(q, e, h, now)
  redis.call('ZADD', q, ARGV[3], ARGV[2])
  redis.call('ZADD', e, now + ttl, ARGV[2])
  for _, k in ipairs({q, e}) do
    if redis.call('PTTL', k) < ttl then
      redis.call('PEXPIRE', k, ttl)
    end
  end
  if redis.call('ZRANGE', q, 0, 0)[1] ~= ARGV[2] then
    return false
  end
  redis.call('DEL', key)
  redis.call('PUBLISH', key, ARGV[1])
  return true
end

if requeue(KEYS[1]) then
  return 1
end
return release_key(KEYS[1], ARGV[1])
