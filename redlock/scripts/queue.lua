-- Prepended by the Go side (scripts.go) to every script that touches a lock's wait queue, so that
-- the queue's names and the every-release rule are written here once.

-- queue_of(key): the wait queue of lock key `key` (member: a waiter's id, score: its arrival stamp)
-- and its entries' deadlines (member: id, score: server time in ms), both in the key's Redis
-- Cluster hash slot: a hash tag of the resource is kept ('lockq:'/'lockt:' .. resource), otherwise
-- the whole key becomes the tag ('lockqu:{' .. key .. '}'). A key without a tag that has a '}'
-- cannot be made a tag: nil, and the resource has no queue.
local function queue_of(key)
  local r = string.sub(key, 6)
  local o = string.find(r, '{', 1, true)
  local c = o and string.find(r, '}', o + 1, true)
  if c and c > o + 1 then
    return 'lockq:' .. r, 'lockt:' .. r
  elseif not string.find(r, '}', 1, true) then
    return 'lockqu:{' .. key .. '}', 'locktu:{' .. key .. '}'
  end
end

-- now_ms(): the server's clock in ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- expire_entries(q, e, now): drop the entries whose deadline has passed.
local function expire_entries(q, e, now)
  local gone = redis.call('ZRANGEBYSCORE', e, '-inf', now)
  for i = 1, #gone do
    redis.call('ZREM', q, gone[i])
  end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', e, '-inf', now)
  end
end

-- release_key(key, token): what every release does, fair client or not: compare-and-delete, then
-- tell waiters by PUBLISH on a channel named like the key, with the token as the message, so that a
-- waiter can tell the holder's release from another loser's cleanup. While fair waiters are queued
-- (of any client), the key is not deleted but becomes the reservation 'q', which a plain SET NX
-- cannot take and the queue's head can (fair_lock.lua), until the last entry's deadline; the message
-- then names the head ('<token>/<head>'), so that only the head wakes.
-- Returns 1 when the key held token (and is released), 0 otherwise.
local function release_key(key, token)
  if redis.call('GET', key) ~= token then
    return 0
  end
  local q, e = queue_of(key)
  if q and redis.call('EXISTS', e) == 1 then
    local now = now_ms()
    expire_entries(q, e, now)
    local head = redis.call('ZRANGE', q, 0, 0)[1]
    if head then
      local last = redis.call('ZRANGE', e, -1, -1, 'WITHSCORES')
      redis.call('SET', key, 'q', 'PX', math.max(1, tonumber(last[2]) - now))
      redis.call('PUBLISH', key, token .. '/' .. head)
      return 1
    end
  end
  redis.call('DEL', key)
  redis.call('PUBLISH', key, token)
  return 1
end

