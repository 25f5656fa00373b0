-- Who leads, as one master sees it.
-- KEYS[1] the lock key, KEYS[2] the record key. Returns {token, record}, '' for a missing key.
return {redis.call('GET', KEYS[1]) or '', redis.call('GET', KEYS[2]) or ''}
