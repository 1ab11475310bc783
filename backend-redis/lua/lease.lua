-- Leased mode: return a process's previous lease and take a new one,
-- sized by the caller from its recent demand and cut to what the bucket holds.
-- KEYS[1] state hash (GCRA times, epoch)   KEYS[2] leases (hash: id -> "token|field=us,field=us,...")
-- KEYS[3] lease expiries (sorted set: id -> expiry, microseconds)
-- ARGV[1] epoch this process saw last ("" if none)   ARGV[2] fresh epoch to write if state is missing
-- ARGV[3] safe share (0, 1]   ARGV[4] lease id   ARGV[5] lease TTL (us)
-- ARGV[6] epoch the returned lease was granted under ("" if none)
-- ARGV[7] token of the returned lease ("" if none)   ARGV[8] token of the new one
-- then per limit, 6 values: field, microseconds per unit, burst, give back, want, cost
--   field: the state's field of the limit's GCRA time (named by dimension and window);
--   give back > 0: unused units of the previous lease, refunded if that lease (its token) is
--     still on record: so a call run twice (retried after a lost reply) never refunds twice;
--   give back < 0: units charged beyond the lease at settle (always charged);
--   cost: what the request at hand takes (0 when only returning the lease).
-- A lease is recorded as the GCRA time it took from each field, so any
-- process can give it back whatever its own config says. The caller's own
-- record is settled first (its unused part back); then expired leases of
-- other processes are reaped: their whole grant goes back, so a crashed
-- process's share returns within one TTL (what it had used of it is the
-- over-admission bound). A live process returns its lease before it
-- expires, used up or not, so that no reaping refunds what it used.
-- A request that one limit cannot cover is granted nothing on any (all or
-- nothing, as in exact mode: a partial lease would only lock capacity away
-- from the other processes), and told per limit in how many microseconds
-- its cost would fit, with no other process's demand: its retry-after.
-- Returns {epoch, reset, g1, ..., gn, w1, ..., wn}: grants, then those waits.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local state, leases, expiries = KEYS[1], KEYS[2], KEYS[3]
local n = (#ARGV - 8) / 6
local function arg(i, k) return ARGV[8 + (i - 1) * 6 + k] end
local function num(i, k) return tonumber(arg(i, k)) end

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
      local interval, burst = num(i, 2), num(i, 3)
      local held = math.floor(burst * tonumber(ARGV[3]))
      redis.call('HSET', state, arg(i, 1), string.format('%.0f', now + (burst - held) * interval))
    end
  end
end

-- Moves a GCRA time: us > 0 gives capacity back (never past full, nor
-- below a provider's hold: see hold.lua); us < 0 charges it.
local function shift(field, us)
  if us == 0 then return end
  local tat = tonumber(redis.call('HGET', state, field) or now)
  if tat < now then tat = now end
  tat = tat - us
  local floor = math.max(now, tonumber(redis.call('HGET', state, 'hold:' .. field) or 0))
  if tat < floor then tat = floor end
  redis.call('HSET', state, field, string.format('%.0f', tat))
end

local function give_back_record(id)
  local held = redis.call('HGET', leases, id)
  if held then
    for field, us in string.gmatch(string.match(held, '|(.*)$') or '', '([^,=]+)=([^,]+)') do
      shift(field, tonumber(us))
    end
  end
  redis.call('HDEL', leases, id)
  redis.call('ZREM', expiries, id)
end

-- This process's own record first, expired or not: it knows what it used
-- of it, and gives back only the rest (reaped, the whole grant would go
-- back, what it used included).
local record = redis.call('HGET', leases, ARGV[4])
local mine = record and ARGV[7] ~= '' and string.match(record, '^([^|]*)|') == ARGV[7] and ARGV[6] == epoch
redis.call('HDEL', leases, ARGV[4])
redis.call('ZREM', expiries, ARGV[4])
for i = 1, n do
  local give, interval = num(i, 4), num(i, 2)
  if give < 0 then
    shift(arg(i, 1), -math.ceil(-give * interval))
  elseif mine then
    shift(arg(i, 1), math.floor(give * interval))
  end
end

for _, id in ipairs(redis.call('ZRANGEBYSCORE', expiries, '-inf', now)) do
  give_back_record(id)
end

local tats, rooms, waits = {}, {}, {}
local fits = true
for i = 1, n do
  local interval, burst, cost = num(i, 2), num(i, 3), num(i, 6)
  local tat = tonumber(redis.call('HGET', state, arg(i, 1)) or now)
  if tat < now then tat = now end
  tats[i] = tat
  rooms[i] = math.floor((now + burst * interval - tat) / interval)
  waits[i] = 0
  if cost > 0 and rooms[i] < cost then
    fits = false
    waits[i] = math.ceil(tat + (cost - burst) * interval - now)
  end
end

local reply = {epoch, reset}
local granted = {}
for i = 1, n do
  local field, interval, want = arg(i, 1), num(i, 2), num(i, 5)
  local grant = 0
  if fits then grant = math.max(0, math.min(want, rooms[i])) end
  if grant > 0 then
    local took = math.ceil(grant * interval)
    redis.call('HSET', state, field, string.format('%.0f', tats[i] + took))
    granted[#granted + 1] = field .. '=' .. string.format('%.0f', math.floor(grant * interval))
  end
  reply[#reply + 1] = grant
end
for i = 1, n do reply[#reply + 1] = waits[i] end
if #granted > 0 then
  redis.call('HSET', leases, ARGV[4], ARGV[8] .. '|' .. table.concat(granted, ','))
  redis.call('ZADD', expiries, now + tonumber(ARGV[5]), ARGV[4])
end
return reply
