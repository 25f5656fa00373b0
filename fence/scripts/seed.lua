-- Raise a fence counter to at least a floor; never lower it.
-- KEYS[1] the counter key, fence:<resource>. ARGV[1] the floor: a decimal integer without sign
-- or leading zeros, at most 2^63-1 (what INCR can reach).
-- A missing key gets the larger of the floor and the clock floor mint.lua would give it, so that
-- a seed is never below what the next mint would have returned.
-- Returns 1 if the counter was raised, 0 if it already was at least the floor.
-- Numbers are compared as decimal strings, by length and then digit by digit, because Lua
-- numbers are doubles and cannot tell counters apart above 2^53.
local function below(a, b)
  return #a < #b or (#a == #b and a < b)
end
local floor = ARGV[1]
local cur = redis.call('GET', KEYS[1])
if cur then
  if cur == '0' or string.match(cur, '^[1-9]%d*$') then
    if not below(cur, floor) then
      return 0
    end
  elseif not string.match(cur, '^%-[1-9]%d*$') then
    -- INCR would fail on it too; raising it would hide whatever wrote it.
    return redis.error_reply('ERR fence: ' .. KEYS[1] .. ' holds no integer')
  end
else
  local t = redis.call('TIME')
  local clock = string.format('%d%06d', tonumber(t[1]), tonumber(t[2]))
  if below(floor, clock) then
    floor = clock
  end
end
redis.call('SET', KEYS[1], floor)
return 1
