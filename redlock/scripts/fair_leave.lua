-- A queued waiter leaves: it won, gave up or failed. Its entry goes, with any that expired; a
-- reservation left for the queue wakes the new head, or is deleted when nobody is left.
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] deadlines; ARGV the ids that leave (one, or several
-- entries that locks passed on in-process left behind). Returns 1.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for i = 1, #ARGV do
  gone[#gone + 1] = ARGV[i]
end
for i = 1, #gone do
  redis.call('ZREM', KEYS[2], gone[i])
  redis.call('ZREM', KEYS[3], gone[i])
end
if redis.call('GET', KEYS[1]) == 'q' then
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if head then
    redis.call('PUBLISH', KEYS[1], 'q/' .. head)
  else
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', KEYS[1], 'q')
  end
end
return 1
