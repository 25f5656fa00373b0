-- The release of a lock (queue.lua's release_key on each of its keys): a key that holds the token is
-- deleted, or handed to the head of its wait queue when fair waiters queue on it.
-- KEYS the lock keys (one, or a lock's several resources), ARGV[1] the token.
-- Returns 1 if every key held the token (and is now released); otherwise the value held by the first
-- key that did not (another holder's token, which a lost attempt's error names), or 0 when none held one.
local all, holder = 1, false
for _, key in ipairs(KEYS) do
  if release_key(key, ARGV[1]) == 0 then
    all = 0
    if not holder then
      holder = redis.call('GET', key)
    end
  end
end
if all == 0 and holder then
  return holder
end
return all
