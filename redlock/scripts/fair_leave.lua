-- A queued waiter leaves: it won, gave up or failed. Its entry goes, with any that expired; a
-- reservation left for the queue wakes the new head, or is deleted when nobody is left.
-- KEYS[1] lock key; ARGV the ids that leave (one, or several entries that locks passed on
-- in-process left behind). Returns 1.
local q, e = queue_of(KEYS[1])
if not q then
  return 1
end
local gone = redis.call('ZRANGEBYSCORE', e, '-inf', now_ms())
for i = 1, #ARGV do
  gone[#gone + 1] = ARGV[i]
end
for i = 1, #gone do
  redis.call('ZREM', q, gone[i])
  redis.call('ZREM', e, gone[i])
end
if redis.call('GET', KEYS[1]) == 'q' then
  local head = redis.call('ZRANGE', q, 0, 0)[1]
  if head then
    redis.call('PUBLISH', KEYS[1], 'q/' .. head)
  else
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', KEYS[1], 'q')
  end
end
return 1
