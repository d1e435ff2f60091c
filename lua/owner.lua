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
-- lease  lease key: the string "<owner> <op> [<holder> ]<token>", with a PX expiry
-- mine   "<owner> <op> ": the value's prefix when this attempt holds the lease

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
