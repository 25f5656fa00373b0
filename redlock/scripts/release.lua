-- The release of a lock (queue.lua's release_key on each of its keys).
-- KEYS the lock keys (one, or a lock's several resources), ARGV[1] the token.
-- ARGV[2..4], for the undo of a queued waiter's lost attempt (fair_lock.lua): the waiter's id,
-- arrival stamp and entry TTL in ms. Where the attempt took the key (as the queue's head, or over
-- a key handed to it), its entry left the queue; it goes back at its stamp before the key is
-- released, so that the waiter keeps its place on every master. Without that, on a master the
-- holder lacks (its own attempt lost there, or the key expired) each waiter's attempt took the
-- free key and left the queue, the queue held whoever had tried last, and a release there handed
-- the key to a later arrival while the other masters reserved it for the earliest: the later one
-- collected a majority first (the simulator, seed 4480757040280684745). When the waiter is the
-- head again, the key is deleted (the waiter's next attempt takes it; waiters behind it queue);
-- otherwise it goes on to the head (hand_to_head).
-- Returns 1 if every key held the token (and is now released), 0 otherwise.
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

local all = 1
for _, key in ipairs(KEYS) do
  if not (ARGV[2] and requeue(key)) and release_key(key, ARGV[1]) == 0 then
    all = 0
  end
end
return all
