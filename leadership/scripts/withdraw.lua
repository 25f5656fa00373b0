-- Withdraw the identity record of a term that ends, if it is still ours.
-- KEYS[1] the record key. ARGV[1] the record. Returns 1 if it was ours (now deleted and the
-- change announced), 0 otherwise.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[1], '')
return 1
