-- Compare-and-delete: remove each lock key only while it still holds our token, and then tell
-- waiters: PUBLISH on a channel named like the key, with our token as the message, so that a
-- waiter can tell the holder's release from another loser's cleanup.
-- When fair waiters are queued (fair_lock.lua), a key is not deleted but handed to the queue:
-- it becomes the reservation 'q', which a plain SET NX cannot take and the queue's head can, and
-- the message names the head as well ('<token>/<head>'), so that only the head wakes.
-- The queue's keys are derived from the lock key as queueKeys in fair.go does, in its hash slot.
-- KEYS the lock keys (one, or a lock's several resources), ARGV[1] token.
-- Returns 1 if every key held our token (and is now released), 0 otherwise.
local function release(key)
  if redis.call('GET', key) ~= ARGV[1] then
    return 0
  end
  local r = string.sub(key, 6)
  local o = string.find(r, '{', 1, true)
  local c = o and string.find(r, '}', o + 1, true)
  local q, e
  if c and c > o + 1 then
    q, e = 'lockq:' .. r, 'lockt:' .. r
  elseif not string.find(r, '}', 1, true) then
    q, e = 'lockqu:{' .. key .. '}', 'locktu:{' .. key .. '}'
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
    if head then
      local last = redis.call('ZRANGE', e, -1, -1, 'WITHSCORES')
      redis.call('SET', key, 'q', 'PX', math.max(1, tonumber(last[2]) - now))
      redis.call('PUBLISH', key, ARGV[1] .. '/' .. head)
      return 1
    end
  end
  redis.call('DEL', key)
  redis.call('PUBLISH', key, ARGV[1])
  return 1
end

local all = 1
for _, key in ipairs(KEYS) do
  if release(key) == 0 then
    all = 0
  end
end
return all
