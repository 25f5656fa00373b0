-- Compare-and-delete: remove each lock key only while it still holds our token, and then tell
-- waiters: PUBLISH on a channel named like the key, with our token as the message, so that a
-- waiter can tell the holder's release from another loser's cleanup.
-- When fair waiters are queued (fair_lock.lua), a key is not deleted but handed to the queue:
-- it becomes the reservation 'q', which a plain SET NX cannot take and the queue's head can, and
-- the message names the head as well ('<token>/<head>'), so that only the head wakes.
-- The queue's keys are derived from the lock key as queueKeys in fair.go does, in its hash slot.
-- A direct handoff (handoff.go) adds ARGV[2] the id of a queued waiter of the releaser's own client,
-- ARGV[3] its new token, ARGV[4] its TTL in ms: when that waiter is the head, the key is set to its
-- token at once and its entry removed, whether the key held our token or was free for the head
-- (absent, or the reservation, as fair_lock.lua would take it). The waiter is told in-process;
-- when the key held our token, the release is still published, naming the head, so that a waiter
-- of another client that sleeps on our token (a client without fairness) wakes and reads the new
-- holder instead of sleeping until our key would have expired. ARGV[2] '' is no handoff.
-- ARGV[5], ARGV[6], ...: entries to remove from the queue first (waiters of our client that took
-- the lock in-process and left their entries behind, see passOn in handoff.go).
-- KEYS the lock keys (one, or a lock's several resources), ARGV[1] token.
-- Returns 1 if every key held our token (and is now released), 2 if it held our token and was
-- handed to ARGV[2], 3 if it was free and handed to ARGV[2], 0 otherwise.
local to = ARGV[2]
if to == '' then
  to = nil
end

local function release(key)
  local r = string.sub(key, 6)
  local o = string.find(r, '{', 1, true)
  local c = o and string.find(r, '}', o + 1, true)
  local q, e
  if c and c > o + 1 then
    q, e = 'lockq:' .. r, 'lockt:' .. r
  elseif not string.find(r, '}', 1, true) then
    q, e = 'lockqu:{' .. key .. '}', 'locktu:{' .. key .. '}'
  end
  if q then
    for i = 5, #ARGV do
      redis.call('ZREM', q, ARGV[i])
      redis.call('ZREM', e, ARGV[i])
    end
  end
  local v = redis.call('GET', key)
  local ours = v == ARGV[1]
  if not ours and not (to and (not v or v == 'q')) then
    return 0
  end
  if q and redis.call('EXISTS', e) == 1 then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local gone = redis.call('ZRANGEBYSCORE', e, '-inf', now)
    for i = 1, #gone do
      redis.call('ZREM', q, gone[i])
    end
    redis.call('ZREMRANGEBYSCORE', e, '-inf', now)
    local head = redis.call('ZRANGE', q, 0, 0)[1]
    if head and head == to then
      redis.call('SET', key, ARGV[3], 'PX', ARGV[4])
      redis.call('ZREM', q, head)
      redis.call('ZREM', e, head)
      if ours then
        redis.call('PUBLISH', key, ARGV[1] .. '/' .. head)
        return 2
      end
      return 3
    end
    if not ours then
      return 0
    end
    if head then
      local last = redis.call('ZRANGE', e, -1, -1, 'WITHSCORES')
      redis.call('SET', key, 'q', 'PX', math.max(1, tonumber(last[2]) - now))
      redis.call('PUBLISH', key, ARGV[1] .. '/' .. head)
      return 1
    end
  end
  if not ours then
    return 0
  end
  redis.call('DEL', key)
  redis.call('PUBLISH', key, ARGV[1])
  return 1
end

local all = 1
for _, key in ipairs(KEYS) do
  local r = release(key)
  if r == 0 then
    all = 0
  elseif r == 2 and all == 1 then
    all = 2
  end
end
return all
