-- What one master holds for a lock, for an operator (Client.Inspect); reads only. Sent with
-- queue.lua prepended. KEYS[1] the lock key.
-- Returns {kind, value, PTTL in ms, the wait queue's length, its head's id, the head's claim}:
-- kind is 'none' (no key), 'string' (value is the holder's token, or 'q', the reservation for the
-- queue's head) or 'other' (a key of another type: no lock can be taken on it); PTTL -2 no key, -1
-- no expiry; a resource with no queue (a '}' outside a hash tag) has length 0.
local v = redis.pcall('GET', KEYS[1])
local kind = 'string'
if type(v) == 'table' and v.err then
  kind, v = 'other', ''
elseif not v then
  kind, v = 'none', ''
end
local n, head, claim = 0, '', ''
local q, _, h = queue_of(KEYS[1])
if q then
  local all = redis.call('ZRANGE', q, 0, -1)
  n = #all
  if all[1] then
    head = all[1]
    claim = redis.call('HGET', h, head) or ''
  end
end
return {kind, v, redis.call('PTTL', KEYS[1]), n, head, claim}
