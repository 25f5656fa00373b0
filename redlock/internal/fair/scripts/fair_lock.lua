-- One fair attempt of a queued waiter: take the lock key only when it is free (absent, or the
-- reservation 'q' that release.lua leaves for the queue) and we are the head of the queue of
-- waiters whose entries have not expired; otherwise enqueue us, or refresh our entry.
-- KEYS[1] lock key; its queue and the entries' deadlines are queue.lua's queue_of.
-- ARGV[1] token, ARGV[2] lock TTL in ms, ARGV[3] id, ARGV[4] stamp, ARGV[5] entry TTL in ms,
-- ARGV[6] our client's tag (the ids of its waiters hold it at characters 15-22), ARGV[7] the prefix
-- of every token of our waiter's attempts ('' for none), ARGV[8] '1' when our entry claims the key
-- ('' when it does not: a claim an earlier attempt left is removed). The claim (hand_to_head in
-- queue.lua) is this attempt's token and TTL: a release hands us the key with them.
-- A key that holds a token with our prefix was handed to us (or set by an attempt of ours whose
-- release has not come yet): it takes this attempt's token and TTL like a free key, when that
-- token's attempt is an earlier one than ours (tokens are '<prefix>.<attempt, hex>'). A call of an
-- earlier attempt that arrives late leaves a later attempt's key alone: that attempt may hold
-- the lock on it.
-- Returns {1} when the key is ours (and our entry is gone), else {0, value of the key or false,
-- ms until it may be free: the key's PTTL, or, when the key is free for another head, until
-- that head's entry expires, the arrival stamp (14 hex digits of µs, as in the ids) of the first
-- entry of another client among the first 64 queued, the 64th entry's when all 64 are ours (no
-- other client's can be earlier), '' when there is none}.
-- A key that can have no queue (see queue_of) gets a plain SET NX, and '0' as the first foreign
-- stamp: no waiter of ours is known to be ahead of anyone.
local q, e, h = queue_of(KEYS[1])
if not q then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {1}
  end
  return {0, redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), '0'}
end
local now = now_ms()
expire_entries(q, e, h, now)
local v = redis.call('GET', KEYS[1])
if v and ARGV[7] ~= '' and string.sub(v, 1, #ARGV[7]) == ARGV[7] then
  local theirs = tonumber(string.sub(v, #ARGV[7] + 2), 16)
  local ours = tonumber(string.sub(ARGV[1], #ARGV[7] + 2), 16)
  if theirs and ours and theirs >= ours then
    return {0, v, redis.call('PTTL', KEYS[1]), ''}
  end
  local first = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
  if first[1] and first[1] ~= ARGV[3] and tonumber(first[2]) < tonumber(ARGV[4]) then
    -- A waiter queued ahead of us here (our entry left when the key was handed to us): the key
    -- goes on to it, and we queue behind. Two waiters that each took over the keys handed to
    -- them on a minority, and whose lost attempts' releases handed those keys to each other,
    -- split the masters at every attempt until the keys expired.
    hand_to_head(KEYS[1], v, q, e, h, now)
    v = redis.call('GET', KEYS[1])
  else
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    drop(q, e, h, ARGV[3])
    -- The earlier attempt's token is gone from the key: tell the plain waiters that sleep on it.
    redis.call('PUBLISH', handed_channel(KEYS[1]), v)
    return {1}
  end
end
redis.call('ZADD', q, ARGV[4], ARGV[3])
local head = redis.call('ZRANGE', q, 0, 0)[1]
if head == ARGV[3] and (not v or v == 'q') then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  drop(q, e, h, ARGV[3])
  return {1}
end
local ttl = tonumber(ARGV[5])
redis.call('ZADD', e, now + ttl, ARGV[3])
if ARGV[8] == '1' then
  redis.call('HSET', h, ARGV[3], ARGV[1] .. ' ' .. ARGV[2])
else
  redis.call('HDEL', h, ARGV[3])
end
for _, k in ipairs({q, e, h}) do
  if redis.call('PTTL', k) < ttl then
    redis.call('PEXPIRE', k, ttl)
  end
end
local foreign = ''
local first = redis.call('ZRANGE', q, 0, 63)
for i = 1, #first do
  if string.sub(first[i], 15, 22) ~= ARGV[6] then
    foreign = string.sub(first[i], 1, 14)
    break
  end
end
if foreign == '' and #first == 64 then
  foreign = string.sub(first[64], 1, 14)
end
if v and v ~= 'q' then
  return {0, v, redis.call('PTTL', KEYS[1]), foreign}
end
local until_ = redis.call('ZSCORE', e, head)
if not until_ then
  return {0, v, ttl, foreign}
end
return {0, v, math.max(0, tonumber(until_) - now), foreign}
