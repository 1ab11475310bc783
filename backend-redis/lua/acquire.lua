-- Exact mode: reserve every limit of one shared scope, all or nothing.
-- KEYS[1] state hash (GCRA theoretical arrival times, epoch)
-- KEYS[2] concurrency slots (sorted set: slot id -> expiry, microseconds), named only
--         where the scope has a concurrency limit; its member 'open', of score +inf and
--         never counted, keeps the key from vanishing with the last slot (see `take_slot`)
-- ARGV[1] epoch this process saw last ("" if none)   ARGV[2] fresh epoch to write if state is missing
-- ARGV[3] safe share fraction (0, 1]                   ARGV[4] slot id   ARGV[5] slot TTL (us)
-- then per limit, 5 values: kind ("g" rate, "c" concurrency), field, a, b, cost
--   g: field = the state's field of its GCRA time (named by dimension and window,
--      so processes listing limits in another order share each bucket),
--      a = microseconds per unit (emission interval), b = burst (units)
--   c: field unused, a = capacity, b = unused
-- Returns {1, epoch, reset} on admission, {0, limit index (1-based), retry us or -1, epoch, reset} on refusal.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local state, slots = KEYS[1], KEYS[2]
local epoch = redis.call('HGET', state, 'epoch')
local reset = 0
local n = (#ARGV - 5) / 5
local function base(i) return 5 + (i - 1) * 5 end
-- Redis deletes a sorted set with its last member. On a Cluster, a slot
-- being migrated is served by either node only while it holds all of the
-- keys a call names or none of them; a scope's state with no slots key
-- beside it would be answered TRYAGAIN for the whole migration.
local function take_slot(expiry, id)
  redis.call('ZADD', slots, expiry, id)
  redis.call('ZADD', slots, 'NX', '+inf', 'open')
end
if not epoch then
  epoch = ARGV[2]
  redis.call('HSET', state, 'epoch', epoch)
  if ARGV[1] ~= '' then
    -- The state vanished (a restart lost it) after this process saw it:
    -- start every limit holding only the safe share, never a full bucket.
    -- Concurrency holds the rest in placeholder slots for one slot TTL, by
    -- when the live processes' heartbeats have added their slots again.
    reset = 1
    local share = tonumber(ARGV[3])
    for i = 1, n do
      local b = base(i)
      if ARGV[b + 1] == 'g' then
        local interval, burst = tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
        local held = math.floor(burst * share)
        redis.call('HSET', state, ARGV[b + 2], string.format('%.0f', now + (burst - held) * interval))
      else
        local capacity = tonumber(ARGV[b + 3])
        local free = math.max(1, math.floor(capacity * share))
        for k = 1, capacity - free do
          take_slot(now + tonumber(ARGV[5]), 'restart:' .. epoch .. ':' .. k)
        end
      end
    end
  end
end
local tats = {}
for i = 1, n do
  local b = base(i)
  local kind, field = ARGV[b + 1], ARGV[b + 2]
  local a, burst, cost = tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
  if kind == 'g' then
    local tat = tonumber(redis.call('HGET', state, field) or now)
    if tat < now then tat = now end
    -- The fit is judged on exact times, the charge rounded up to the
    -- microsecond: rounding the charge before the fit would refuse a
    -- request of the whole burst for ever where burst * a is fractional.
    local over = (tat - now) + cost * a - burst * a
    local new_tat = tat + math.ceil(cost * a)
    if over > 0 then
      return {0, i, math.ceil(over), epoch, reset}
    end
    tats[i] = new_tat
  elseif cost > 0 then
    redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
    if redis.call('ZCOUNT', slots, '-inf', '(+inf') + cost > a then
      return {0, i, -1, epoch, reset}
    end
  end
end
for i = 1, n do
  local b = base(i)
  if ARGV[b + 1] == 'g' then
    redis.call('HSET', state, ARGV[b + 2], string.format('%.0f', tats[i]))
  elseif tonumber(ARGV[b + 5]) > 0 then
    take_slot(now + tonumber(ARGV[5]), ARGV[4])
  end
end
return {1, epoch, reset}
