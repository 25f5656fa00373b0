-- Mint a fencing token: the next value of the counter KEYS[1], fence:<resource>.
-- A key that exists is incremented. A missing key is set to a floor taken from the server's clock,
-- in microseconds: the node cannot tell a new resource from a key it lost (a restart without
-- persistence, an eviction, a deletion), so it treats them alike, and the floor is above every
-- fence minted for the key before it was lost, under the precondition stated in docs/fencing.md.
-- Returns the fence as a decimal string, exact at every value INCR reaches (a Lua number is a
-- double: above 2^53 it would round, and two mints could return one fence); or, when the key holds
-- no positive integer, a one-element array with the reason, a reply of its own shape so that the
-- caller tells it from a failure of the node. Such a key is left as it was.
local n = redis.pcall('INCR', KEYS[1])
if type(n) == 'table' then
  return {n.err}
end
if n > 1 then
  -- n is rounded above 2^53 (fine for the comparisons here); the key holds the exact value.
  return redis.call('GET', KEYS[1])
end
if n < 1 then
  redis.call('DECR', KEYS[1])
  return {'value ' .. (n - 1) .. ' is not above 0'}
end
-- INCR made the key 1: it was missing (or held 0, which no mint leaves). The floor is built as a
-- decimal string, never through a Lua number's own formatting, which may round or use exponents.
local t = redis.call('TIME')
local floor = string.format('%d%06d', tonumber(t[1]), tonumber(t[2]))
redis.call('SET', KEYS[1], floor)
return floor
