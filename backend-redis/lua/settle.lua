-- Exact mode: reconcile one shared scope's reservation with actual usage.
-- KEYS[1] state hash   KEYS[2] concurrency slots (named only where the scope has concurrency)
-- ARGV[1] epoch the reservation was made under   ARGV[2] slot id ("" if none)
-- then per rate limit, 3 values: its field in the state hash, microseconds per unit, delta (actual - reserved units)
-- A refund (negative delta) gives capacity back, never past a full bucket; a
-- charge (positive delta) takes it, into debt if need be. When the state was
-- lost since the reservation (the epoch changed), refunds are dropped: the
-- new state never held them, nor do they take a limit below a provider's
-- hold (hold.lua). Returns the number of limits touched.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local state, slots = KEYS[1], KEYS[2]
if ARGV[2] ~= '' then
  redis.call('ZREM', slots, ARGV[2])
end
local same_epoch = redis.call('HGET', state, 'epoch') == ARGV[1]
local touched = 0
for base = 3, #ARGV, 3 do
  local field = ARGV[base]
  local interval, delta = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])
  if delta > 0 or (delta < 0 and same_epoch) then
    local tat = tonumber(redis.call('HGET', state, field) or now)
    if delta > 0 then
      if tat < now then tat = now end
      tat = tat + math.ceil(delta * interval)
    else
      -- A refund never reaches below a provider's hold (see hold.lua).
      local floor = math.max(now, tonumber(redis.call('HGET', state, 'hold:' .. field) or 0))
      tat = math.max(tat + math.floor(delta * interval), floor)
    end
    redis.call('HSET', state, field, string.format('%.0f', tat))
    touched = touched + 1
  end
end
return touched
