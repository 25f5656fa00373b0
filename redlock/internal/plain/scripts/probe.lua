-- The first call of an attempt woken by a release, to the master every waiter of the resource asks
-- first (probeMaster): the SET NX of a plain attempt and, when the key is held, who holds it and
-- for how long, as holder.lua reads them, so that a waiter that lost here learns it in this call
-- and not in a second one. KEYS[1] the lock key; ARGV[1] the token; ARGV[2] the TTL in ms.
-- Returns 1 when the key was set; else {token, PTTL in ms} (PTTL -1: no expiry); 0 when the key
-- holds another type, whose holder a GET cannot read (the waiter reads it as after any loss).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  return 0
end
return {v, redis.call('PTTL', KEYS[1])}
