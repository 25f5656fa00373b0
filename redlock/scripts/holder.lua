-- Who holds the lock key, and for how long: read by a waiter that lost an attempt.
-- KEYS[1] lock key. Returns {token or nil, PTTL in ms: -2 no key, -1 no expiry}.
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
