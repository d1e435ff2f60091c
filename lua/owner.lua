-- leasehold reads of a lease key, shared by the four operations (scripts.rs puts this
-- file first).
--
-- A batch runs many items, often several on one key (contenders for one resource, a renew
-- and a release of one lease). Nothing else runs while the script does, so a key's value
-- and PTTL read once stay true for the rest of the call until an item of this call writes
-- the key — and each writer below records what it wrote. A PTTL read earlier in the call
-- than the item it answers was still read after that item was sent, which is all the
-- client's validity needs (it counts from before the send).
--
-- lease  lease key: the string "<owner> <op> [<holder> ]<token>[ d<delay_ms>]", with a PX
--        expiry
-- mine   "<owner> <op> ": the value's prefix when this attempt holds the lease
--
-- Lock-delay: a lease acquired with one ends its value with " d<delay_ms>" and its key
-- lives delay_ms longer than the lease: PTTL = the lease's own remaining time + delay_ms.
-- Once PTTL <= delay_ms the lease has ended (it expired, unreleased) and the key only
-- holds its lock-delay: it refuses acquisitions ('DELAYED'), renewals ('ABSENT') and is
-- shown as such, until it expires or its holder releases it. Every PTTL a reply carries is
-- the lease's own (the key's less the delay).

local known = {}

-- The lease's {value}, or false when there is no lease key. Its PTTL is read by pttl(),
-- only by the items that answer with it: a renewal or a release never reads it. (A prefix
-- is tested with a plain string.find at 1, not by comparing a string.sub: no new string
-- per item.)
local function read(lease)
  local seen = known[lease]
  if seen == nil then
    local held = redis.call('GET', lease)
    if held then
      seen = {held}
    else
      seen = false
    end
    known[lease] = seen
  end
  return seen
end

-- The PTTL of a lease read() found (seen), read once per call.
local function pttl(lease, seen)
  local left = seen[2]
  if not left then
    left = redis.call('PTTL', lease)
    seen[2] = left
  end
  return left
end

-- The lock-delay in ms the value of `seen` carries, 0 for none; worked out once per key
-- and call. The suffix " d<digits>" is at most 9 bytes (a delay is at most an hour), so
-- only the value's end is searched; it cannot be read into anything else: the token
-- before it is digits only, and a value without one ends with its token.
local function delay_of(seen)
  local delay = seen.delay
  if delay == nil then
    delay = 0
    local at = string.find(seen[1], ' d', -10, true)
    while at do
      local digits = string.match(seen[1], '^ d(%d+)$', at)
      if digits then
        delay = tonumber(digits)
        break
      end
      at = string.find(seen[1], ' d', at + 1, true)
    end
    seen.delay = delay
  end
  return delay
end

-- The fencing token's text and the holder label (or nil) of the value of `seen`.
local function token_and_holder(seen)
  local held = seen[1]
  if delay_of(seen) > 0 then
    held = string.match(held, '^(.*) d%d+$')
  end
  return string.match(held, '%d+$') or '', string.match(held, '^%S+ %S+ (%S+) %d+$')
end

-- The lease's own remaining time, and whether it has ended and its key only holds the
-- lock-delay (the time then being the delay's remaining time).
local function left_of(lease, seen)
  local left, delay = pttl(lease, seen), delay_of(seen)
  if delay == 0 then
    return left, false
  elseif left <= delay then
    return left, true
  end
  return left - delay, false
end

-- Records what this call wrote: the lease's new value and PTTL, or false once deleted.
local function wrote(lease, seen)
  known[lease] = seen
end

-- Returns nil when the lease is held by exactly this attempt (and what was read);
-- otherwise the reply that says why not: 'ABSENT' (no lease key) or 'NOT_OWNER'.
local function not_held(lease, mine)
  local seen = read(lease)
  if not seen then
    return 'ABSENT'
  end
  if string.find(seen[1], mine, 1, true) ~= 1 then
    return 'NOT_OWNER'
  end
  return nil, seen
end

-- The channel `suffix` (':released', ':acquired') of the lease whose key is `lease`: a
-- counted lease's slot "<name>#<i>" announces on its name's channel, shared by every slot
-- (protocol::LeaseKeys); no other key holds a '#'.
local function channel(lease, suffix)
  if string.find(lease, '#', 1, true) then
    return string.match(lease, '^(.*)#%d+$') .. suffix
  end
  return lease .. suffix
end
