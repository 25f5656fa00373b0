-- One fair attempt of a queued waiter: take the lock key only when it is free (absent, or the
-- reservation 'q' that release.lua leaves for the queue) and we are the head of the queue of
-- waiters whose entries have not expired; otherwise enqueue us, or refresh our entry.
-- KEYS[1] lock key, KEYS[2] queue (member: our id, score: our arrival stamp in µs), KEYS[3] the
-- entries' deadlines (member: id, score: server time in ms).
-- ARGV[1] token, ARGV[2] lock TTL in ms, ARGV[3] id, ARGV[4] stamp, ARGV[5] entry TTL in ms,
-- ARGV[6] our client's tag (the ids of its waiters hold it at characters 15-22).
-- Returns {1} when the key is ours (and our entry is gone), else {0, value of the key or false,
-- ms until it may be free: the key's PTTL, or, when the key is free for another head, until
-- that head's entry expires, the arrival stamp (14 hex digits of µs, as in the ids) of the first
-- entry of another client among the first 64 queued, the 64th entry's when all 64 are ours (no
-- other client's can be earlier), '' when there is none}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for i = 1, #gone do
  redis.call('ZREM', KEYS[2], gone[i])
end
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
end
local v = redis.call('GET', KEYS[1])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[3])
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if head == ARGV[3] and (not v or v == 'q') then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('ZREM', KEYS[2], ARGV[3])
  redis.call('ZREM', KEYS[3], ARGV[3])
  return {1}
end
local ttl = tonumber(ARGV[5])
redis.call('ZADD', KEYS[3], now + ttl, ARGV[3])
for k = 2, 3 do
  if redis.call('PTTL', KEYS[k]) < ttl then
    redis.call('PEXPIRE', KEYS[k], ttl)
  end
end
local foreign = ''
local first = redis.call('ZRANGE', KEYS[2], 0, 63)
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
local until_ = redis.call('ZSCORE', KEYS[3], head)
if not until_ then
  return {0, v, ttl, foreign}
end
return {0, v, math.max(0, tonumber(until_) - now), foreign}
