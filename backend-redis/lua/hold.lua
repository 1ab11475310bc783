-- A provider refused with a 429: hold rate limits of one shared provider
-- scope empty, for every process, until the provider said to come back.
-- KEYS[1] state hash (GCRA times, epoch)
-- then per held limit, 4 values: field, microseconds per unit, burst, hold (us)
-- A held limit's GCRA time moves to at least now + hold + a whole burst's
-- refill: empty until then, refilling after. The same floor is kept in the
-- field 'hold:' .. field, below which refunds and returned leases never take
-- the GCRA time back: capacity reserved before the 429 and given back after
-- it must not shorten the hold. A limit held longer already is left alone.
-- Returns the number of limits moved.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local state = KEYS[1]
local moved = 0
for base = 1, #ARGV, 4 do
  local field = ARGV[base]
  local interval, burst, hold = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
  local floor = math.ceil(now + hold + burst * interval)
  local tat = tonumber(redis.call('HGET', state, field) or now)
  if tat < floor then
    redis.call('HSET', state, field, string.format('%.0f', floor))
    moved = moved + 1
  end
  local held = tonumber(redis.call('HGET', state, 'hold:' .. field) or 0)
  if held < floor then
    redis.call('HSET', state, 'hold:' .. field, string.format('%.0f', floor))
  end
end
return moved
