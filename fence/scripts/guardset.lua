-- Fenced write: store a value, with the fence of its writer, only if that fence passes the
-- comparison against the fence already stored with the value.
-- Layout: KEYS[1] is a hash with field v (the value) and field f (the fence, in decimal).
-- ARGV[1] value. ARGV[2] fence: a decimal integer without sign or leading zeros, above 0.
-- ARGV[3] TTL in milliseconds, 0 for none. ARGV[4] 1 to admit a fence equal to the stored one
-- (AtLeast), 0 to refuse it (Newer).
-- Returns 1 if the value was stored; otherwise the stored fence, as a string, for the error.
local fence = ARGV[2]
local stored = redis.call('HGET', KEYS[1], 'f')
if stored then
  if not string.match(stored, '^[1-9]%d*$') then
    return redis.error_reply('ERR fence: ' .. KEYS[1] .. ' holds no valid fence in field f')
  end
  -- Decimal strings, compared by length and then digit by digit: Lua numbers are doubles and
  -- cannot tell fences apart above 2^53.
  local older = #fence < #stored or (#fence == #stored and fence < stored)
  if older or (fence == stored and ARGV[4] ~= '1') then
    return stored
  end
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  -- A hash without a fence was written by something other than a guard: storing a fence in it
  -- would pretend that its value had been fenced.
  return redis.error_reply('ERR fence: ' .. KEYS[1] .. ' is a hash without a fence (field f)')
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'f', fence)
if ARGV[3] == '0' then
  -- HSET keeps an earlier TTL: a write without one must not inherit it.
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 1
