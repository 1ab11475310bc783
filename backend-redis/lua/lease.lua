-- Leased mode: return a process's previous lease and take a new one,
-- sized by the caller from its recent demand and cut to what the bucket holds.
-- KEYS[1] state hash (GCRA times, epoch)   KEYS[2] leases (hash: id -> "g1,g2,...")
-- KEYS[3] lease expiries (sorted set: id -> expiry, microseconds)
-- ARGV[1] epoch this process saw last ("" if none)   ARGV[2] fresh epoch to write if state is missing
-- ARGV[3] safe share (0, 1]   ARGV[4] lease id   ARGV[5] lease TTL (us)
-- ARGV[6] epoch the returned lease was granted under ("" if none)
-- then per limit, 4 values: microseconds per unit, burst, give back, want
--   give back > 0: unused units of the previous lease, refunded if that lease is still on record;
--   give back < 0: units charged beyond the lease at settle (always charged).
-- Expired leases of any process are reaped first: their whole grant goes
-- back, so a crashed process's share returns within one TTL (what it had
-- used of it is the over-admission bound).
-- Returns {epoch, reset, g1, g2, ...}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local state, leases, expiries = KEYS[1], KEYS[2], KEYS[3]
local n = (#ARGV - 6) / 4
local function arg(i, k) return tonumber(ARGV[6 + (i - 1) * 4 + k]) end

local epoch = redis.call('HGET', state, 'epoch')
local reset = 0
if not epoch then
  epoch = ARGV[2]
  redis.call('HSET', state, 'epoch', epoch)
  redis.call('DEL', leases, expiries)
  if ARGV[1] ~= '' then
    -- The state vanished after this process saw it: start at the safe share.
    reset = 1
    for i = 1, n do
      local interval, burst = arg(i, 1), arg(i, 2)
      local held = math.floor(burst * tonumber(ARGV[3]))
      redis.call('HSET', state, 'tat' .. i, string.format('%.0f', now + (burst - held) * interval))
    end
  end
end

-- units > 0 go back to the bucket (never past full); units < 0 are charged.
local function adjust(i, units)
  if units == 0 then return end
  local field = 'tat' .. i
  local interval = arg(i, 1)
  local tat = tonumber(redis.call('HGET', state, field) or now)
  if units < 0 then
    if tat < now then tat = now end
    tat = tat + math.ceil(-units * interval)
  else
    tat = tat - math.floor(units * interval)
    if tat < now then tat = now end
  end
  redis.call('HSET', state, field, string.format('%.0f', tat))
end

local function give_back_record(id)
  local held = redis.call('HGET', leases, id)
  if held then
    local i = 1
    for amount in string.gmatch(held, '[^,]+') do
      adjust(i, tonumber(amount))
      i = i + 1
    end
  end
  redis.call('HDEL', leases, id)
  redis.call('ZREM', expiries, id)
end

for _, id in ipairs(redis.call('ZRANGEBYSCORE', expiries, '-inf', now)) do
  give_back_record(id)
end

local mine = redis.call('HEXISTS', leases, ARGV[4]) == 1 and ARGV[6] == epoch
redis.call('HDEL', leases, ARGV[4])
redis.call('ZREM', expiries, ARGV[4])
for i = 1, n do
  local give = arg(i, 3)
  if give < 0 or mine then adjust(i, give) end
end

local reply = {epoch, reset}
local record = {}
local any = false
for i = 1, n do
  local interval, burst, want = arg(i, 1), arg(i, 2), arg(i, 4)
  local field = 'tat' .. i
  local tat = tonumber(redis.call('HGET', state, field) or now)
  if tat < now then tat = now end
  local room = math.floor((now + burst * interval - tat) / interval)
  local grant = math.max(0, math.min(want, room))
  if grant > 0 then
    any = true
    redis.call('HSET', state, field, string.format('%.0f', tat + math.ceil(grant * interval)))
  end
  reply[#reply + 1] = grant
  record[#record + 1] = tostring(grant)
end
if any then
  redis.call('HSET', leases, ARGV[4], table.concat(record, ','))
  redis.call('ZADD', expiries, now + tonumber(ARGV[5]), ARGV[4])
end
return reply
