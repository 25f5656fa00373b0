-- Raise a fence counter to at least a floor; never lower it.
-- KEYS[1] the counter key, fence:<resource>. ARGV[1] the floor: a decimal integer without sign
-- or leading zeros, at most 2^63-1 (what INCR can reach).
-- Returns 1 if the counter was raised, 0 if it already was at least the floor.
-- Numbers are compared as decimal strings, by length and then digit by digit, because Lua
-- numbers are doubles and cannot tell counters apart above 2^53.
local floor = ARGV[1]
local cur = redis.call('GET', KEYS[1])
if cur then
  if cur == '0' or string.match(cur, '^[1-9]%d*$') then
    if #cur > #floor or (#cur == #floor and cur >= floor) then
      return 0
    end
  elseif not string.match(cur, '^%-[1-9]%d*$') then
    -- INCR would fail on it too; raising it would hide whatever wrote it.
    return redis.error_reply('ERR fence: ' .. KEYS[1] .. ' holds no integer')
  end
end
redis.call('SET', KEYS[1], floor)
return 1
