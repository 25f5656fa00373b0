-- A queued waiter leaves: it won, gave up or failed. Its entry goes, with any that expired; a key
-- that a release handed to it is released (it goes on to the next head); a reservation left for
-- the queue goes to the new head (hand_to_head), or is deleted when nobody is left; a free key
-- whose head left wakes the new head ('q/<head>' on the key's channel), which the waiters behind
-- the old head were refused for, and would otherwise sleep until their next attempt.
-- KEYS[1] lock key; ARGV the entries that leave, as drop_entries reads them (one, or several that
-- locks passed on in-process left behind). Returns 1.
local q, e, h = queue_of(KEYS[1])
if not q then
  return 1
end
local now = now_ms()
expire_entries(q, e, h, now)
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  -- A key of another type: no lock to release or hand on, but the entries leave all the same, or
  -- a release once the key is a lock's again would hand it to a waiter that has gone.
  drop_entries(q, e, h, false, 1)
  return 1
end
local before = redis.call('ZRANGE', q, 0, 0)[1]
if drop_entries(q, e, h, v, 1) then
  release_key(KEYS[1], v)
elseif v == 'q' and not hand_to_head(KEYS[1], 'q', q, e, h, now) then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[1], 'q')
elseif not v then
  local head = redis.call('ZRANGE', q, 0, 0)[1]
  if head and head ~= before then
    redis.call('PUBLISH', KEYS[1], 'q/' .. head)
  end
end
return 1
