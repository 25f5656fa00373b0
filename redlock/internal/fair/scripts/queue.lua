-- Prepended by the Go side (scripts.go) to every script that touches a lock's wait queue, so that
-- the queue's names and the every-release rule are written here once.

-- queue_of(key): the wait queue of lock key `key` (member: a waiter's id, score: its arrival stamp),
-- its entries' deadlines (member: id, score: server time in ms) and its entries' claims (field: id,
-- value: '<token> <ttl ms>', the key a release hands that waiter, see hand_to_head), all in the
-- key's Redis Cluster hash slot: a hash tag of the resource is kept ('lockq:'/'lockt:'/'lockh:' ..
-- resource), otherwise the whole key becomes the tag ('lockqu:{' .. key .. '}'). A key without a
-- tag that has a '}' cannot be made a tag: nil, and the resource has no queue.
local function queue_of(key)
  local r = string.sub(key, 6)
  local o = string.find(r, '{', 1, true)
  local c = o and string.find(r, '}', o + 1, true)
  if c and c > o + 1 then
    return 'lockq:' .. r, 'lockt:' .. r, 'lockh:' .. r
  elseif not string.find(r, '}', 1, true) then
    return 'lockqu:{' .. key .. '}', 'locktu:{' .. key .. '}', 'lockhu:{' .. key .. '}'
  end
end

-- drop(q, e, h, id): the entry of waiter id leaves the queue.
local function drop(q, e, h, id)
  redis.call('ZREM', q, id)
  redis.call('ZREM', e, id)
  redis.call('HDEL', h, id)
end

-- now_ms(): the server's clock in ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- drop_entries(q, e, h, v, from): the entries that ARGV names from index `from` on ('<id>',
-- '<id> <prefix>' with the prefix of the tokens of that waiter's attempts, or '<id> <prefix>
-- <token>' with the token of the lock it won) leave the queue. Returns true when v, the key's
-- value, holds a token with one of those prefixes but not the won lock's: a release handed the key
-- to that waiter, which does not hold it.
local function drop_entries(q, e, h, v, from)
  local mine = false
  for i = from, #ARGV do
    local id, p, keep = string.match(ARGV[i], '^(%S+) ?(%S*) ?(%S*)$')
    drop(q, e, h, id)
    if v and p ~= '' and v ~= keep and string.sub(v, 1, #p) == p then
      mine = true
    end
  end
  return mine
end

-- expire_entries(q, e, h, now): drop the entries whose deadline has passed.
local function expire_entries(q, e, h, now)
  local gone = redis.call('ZRANGEBYSCORE', e, '-inf', now)
  for i = 1, #gone do
    redis.call('ZREM', q, gone[i])
    redis.call('HDEL', h, gone[i])
  end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', e, '-inf', now)
  end
end

-- handoff_channel(key, head): where a release that hands key to waiter head with its claim
-- publishes: the channel of head's client (its tag: characters 15-22 of the id) for that key, so
-- that one client's subscriptions receive it, not every client's that waits on the key
-- (push.HandoffChannel). A reservation is published on the key's channel, as a plain release is: a
-- waiter of a client without fairness that sleeps on the released token wakes and reads the
-- reservation's TTL, not the released key's.
local function handoff_channel(key, head)
  return 'lockp:' .. string.sub(head, 15, 22) .. ':' .. key
end

-- handed_channel(key): where a token that left key other than by its release is published for the
-- waiters of clients without fairness, which alone subscribe to it (push.HandedChannel): a key
-- handed to a queued waiter's claim (hand_to_head), a key taken over by a later attempt of the same
-- waiter (fair_lock.lua). One that sleeps on that token wakes and reads the key again.
local function handed_channel(key)
  return 'lockw:' .. key
end

-- hand_to_head(key, from, q, e, h, now): the key is free for the queue (its holder released it, or
-- its reservation lost its head); `from` is what the message names as released (the token, or
-- 'q'). When the queue's head has a claim, the key becomes the claim's token for the claim's TTL,
-- the head leaves the queue, and the message '<from>/<head>/<token>' tells it that it holds the key
-- here; `from` alone on handed_channel(key) wakes the waiters of clients without fairness that
-- sleep on `from`, as its plain release would (without it
-- they slept until its key's expiry). When the head has no claim (a client that makes none), the
-- key becomes the reservation 'q' until the last entry's deadline and the message '<from>/<head>'
-- wakes the head to take it.
-- Returns false when nobody is queued (the caller deletes the key).
local function hand_to_head(key, from, q, e, h, now)
  local head = redis.call('ZRANGE', q, 0, 0)[1]
  if not head then
    return false
  end
  local claim = redis.call('HGET', h, head)
  local sp = claim and string.find(claim, ' ', 1, true)
  if sp then
    local token = string.sub(claim, 1, sp - 1)
    redis.call('SET', key, token, 'PX', string.sub(claim, sp + 1))
    drop(q, e, h, head)
    redis.call('PUBLISH', handoff_channel(key, head), from .. '/' .. head .. '/' .. token)
    redis.call('PUBLISH', handed_channel(key), from)
    return true
  end
  local last = redis.call('ZRANGE', e, -1, -1, 'WITHSCORES')
  redis.call('SET', key, 'q', 'PX', math.max(1, tonumber(last[2]) - now))
  redis.call('PUBLISH', key, from .. '/' .. head)
  return true
end

-- release_key(key, token): what every release does, fair client or not: compare-and-delete, then
-- tell waiters by PUBLISH on a channel named like the key, with the token as the message, so that a
-- waiter can tell the holder's release from another loser's cleanup. While fair waiters are queued
-- (of any client), the key is not deleted but goes to the queue's head (hand_to_head), which a
-- plain SET NX cannot take.
-- Returns 1 when the key held token (and is released), 0 otherwise.
local function release_key(key, token)
  if redis.call('GET', key) ~= token then
    return 0
  end
  local q, e, h = queue_of(key)
  if q and redis.call('EXISTS', e) == 1 then
    local now = now_ms()
    expire_entries(q, e, h, now)
    if hand_to_head(key, token, q, e, h, now) then
      return 1
    end
  end
  redis.call('DEL', key)
  redis.call('PUBLISH', key, token)
  return 1
end
