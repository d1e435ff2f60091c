-- leasehold acquire (docs/design.md §4): one item of a batch; lua/batch.lua runs it. Atomic.
--
-- lease   lease key: the string "<owner> <op> <token>", or "<owner> <op> <holder> <token>"
--         when the acquisition gave a holder label, with a PX expiry
-- fence   fence counter of the lease's group (the hash tag): the last token issued to any
--         lease of the group; no expiry
-- mine    "<owner> <op> " (owner token: base64url; operation id: printable ASCII; neither
--         holds a space)
-- ttl     ttl in milliseconds (integer text, > 0)
-- holder  the holder label (printable ASCII, no space), or nil
-- delay   the lock-delay in milliseconds (integer text, > 0), or nil: stored at the value's
--         end as " d<delay>", and the key kept that much longer than the lease (owner.lua)
-- now     function returning the server's TIME in µs (read at most once per batch)
-- line    the lease's line of waiters (lua/line.lua)
-- id      the attempt's waiter id (protocol::WaiterId)
-- waits   for a waiting acquisition, which joins the line (or keeps its place in it)
--         when it may not take the lease: '+' for its first try, '=' for later ones (in
--         line already); false for a try, which never joins
--
-- Replies, one line of words (status words match protocol::AcquireReply):
--   'ACQUIRED <ttl_ms> <token>'   key was absent and this attempt first in line (or the
--                                 line empty); now held by this attempt
--   'REPLAYED <pttl_ms> <token>'  this very attempt holds it; nothing changed (no TTL reset)
--   'CONFLICT <pttl_ms>'          same owner token, other operation id
--   'CONTENDED <pttl_ms>'         another holder; its value never leaves Redis. pttl_ms is 0
--                                 when the key was absent but live waiters are ahead, and
--                                 for a waiting acquisition behind others (no PTTL is read)
--   'DELAYED <pttl_ms>'           the last lease ended unreleased and its lock-delay runs
--                                 for pttl_ms more (whoever asks, its own attempt too)
-- A waiting acquisition's CONTENDED and DELAYED end with its rank in the line (0: first).
--
-- A try never jumps the line: a free lease goes to the first live waiter, and to a try
-- only when no live waiter is ahead of it (lua/line.lua).
--
-- A counted lease (acquire_slot) is N slot keys "<name>#0" … "<name>#<N-1>", each an
-- ordinary lease key: the attempt's own slot is replayed, else the first free one taken
-- (both replies then end with the slot's number), else CONTENDED with the earliest
-- slot's PTTL (DELAYED if that slot is in its lock-delay). One fence counter serves
-- every slot, so tokens increase across them.
--
-- Invariant (fencing): token = max(last + 1, server TIME in µs), where last is the largest
-- token the group's counter holds. It is strictly greater than every token issued before
-- for this resource (and its whole group), also after the lease key expired, after the
-- counter was evicted, after a replica promotion that lost the last increment, and for a
-- second acquisition in the same group within one batch (same TIME: last + 1 wins).
-- Tokens stay below 2^53 (the µs clock reaches that in the year 2255), so Lua doubles hold
-- them exactly; '%d' prints them whole.
--
-- Cost: a try's refusal is two reads (GET, PTTL), none when an earlier item of the call
-- read the key; it creates no string but its reply, and that once per key and call. A
-- waiting acquisition's adds its place in the line: a read of its tail (the new entry's
-- score is past it), ZADD, then PEXPIRE of a line it made or ZRANK. An acquisition
-- is five calls: GET, the line's check (lua/line.lua: EXISTS of its key, which a lease
-- without waiters lacks; a ZRANGE of its head instead for a waiter in line, and after the
-- EXISTS when the key is there), SET … GET on the counter (read and write in one), SET …
-- PX on the lease, PUBLISH of the acquisition notice; a sixth only when the clock did not
-- move past the counter, and two more when it was first in a line (its ZREM, and the
-- PUBLISH that tells the next waiter its turn). A call of plain items runs the plain
-- acquisition's calls from lua/plain.lua, the same ones.

-- Issues a token and stores this attempt in `lease` (absent); returns the token's text.
local function take(lease, fence, mine, ttl, holder, delay, now)
  local text = issue(fence)
  local value = mine .. text
  if holder then
    -- Before the token, which stays the value's last word but for the lock-delay (inspect
    -- reads it there).
    value = mine .. holder .. ' ' .. text
  end
  -- The ttl goes to Redis as the text it came as: a Lua number would be formatted again.
  local px = ttl
  if delay then
    value = value .. ' d' .. delay
    px = tonumber(ttl) + tonumber(delay)
  end
  redis.call('SET', lease, value, 'PX', px)
  wrote(lease, {value, tonumber(px)})
  -- For observers (LeaseClient::observe). A refusal (an ACL that allows publishing on the
  -- release channel only) costs them their early wake-up, never the acquisition: pcall.
  redis.pcall('PUBLISH', channel(lease, ':acquired'), text)
  return text
end

-- Whose `seen` (a held key's read) is, for this attempt: 'mine', 'conflict' (same owner
-- token, other operation) or nil (someone else).
local function whose(seen, mine)
  local held = seen[1]
  if string.find(held, mine, 1, true) == 1 then
    return 'mine'
  end
  -- Contenders for one key often share a call: the holder's owner is worked out once per
  -- key and call, not once per contender.
  if seen.holder == nil then
    seen.holder = string.match(held, '^[^ ]+ ') or false
  end
  if seen.holder and string.find(mine, seen.holder, 1, true) == 1 then
    return 'conflict'
  end
  return nil
end

-- A refusal `reply`: a waiting acquisition joins the line (or keeps its place) and adds
-- its rank; a try answers it as it is.
local function refused(reply, line, id, waits, now)
  local rank = waits and wait_in_line(line, id, now, waits == '+')
  if rank then
    return reply .. ' ' .. rank
  end
  return reply
end

local function acquire(lease, fence, mine, ttl, holder, delay, now, line, id, waits)
  local seen = read(lease)
  if not seen then
    -- A waiter in line already ('='), or a line this call found there (plain.lua), is
    -- read at once, without looking for the line's key first.
    local may, in_line, next_id = entitled(line, id, 1, 1, now,
      waits ~= '=' and line ~= plain_line)
    if not may then
      return refused('CONTENDED 0', line, id, waits, now)
    end
    local text = take(lease, fence, mine, ttl, holder, delay, now)
    served(line, id, in_line, next_id)
    return 'ACQUIRED ' .. ttl .. ' ' .. text
  end
  -- A waiter behind others, refused by a holder that is not its own attempt's owner: its
  -- rank is all it needs (it sleeps through releases), so no PTTL is read for it.
  if waits and delay_of(seen) == 0 and not whose(seen, mine) then
    local rank = wait_in_line(line, id, now, waits == '+')
    if rank and rank > 0 then
      return 'CONTENDED 0 ' .. rank
    elseif rank then
      return string.format('CONTENDED %d 0', (left_of(lease, seen)))
    end
  end
  local left, delayed = left_of(lease, seen)
  if delayed then
    return refused(string.format('DELAYED %d', left), line, id, waits, now)
  end
  local who = whose(seen, mine)
  if who == 'mine' then
    return string.format('REPLAYED %d %s', left, (token_and_holder(seen)))
  elseif who == 'conflict' then
    return string.format('CONFLICT %d', left)
  end
  if not seen.contended then
    seen.contended = string.format('CONTENDED %d', left)
  end
  return refused(seen.contended, line, id, waits, now)
end

-- slots: the KEYS index of slot 0; n slots follow it, then the fence counter, then the
-- line.
local function acquire_slot(slots, n, mine, ttl, holder, delay, now, id, waits)
  local free, frees, least, least_delayed, conflict = nil, 0, nil, nil, nil
  local line = KEYS[slots + n + 1]
  for i = 0, n - 1 do
    local key = KEYS[slots + i]
    local seen = read(key)
    if not seen then
      free = free or i
      frees = frees + 1
    else
      local left, delayed = left_of(key, seen)
      local who = not delayed and whose(seen, mine)
      if who == 'mine' then
        local token = token_and_holder(seen)
        return string.format('REPLAYED %d %s %d', left, token, i)
      elseif who == 'conflict' then
        conflict = conflict or left
      end
      if not least or left < least then
        least, least_delayed = left, delayed
      end
    end
  end
  if conflict then
    return string.format('CONFLICT %d', conflict)
  elseif free then
    local may, in_line, next_id = entitled(line, id, frees, n, now, waits ~= '=')
    if not may then
      return refused('CONTENDED 0', line, id, waits, now)
    end
    local text = take(KEYS[slots + free], KEYS[slots + n], mine, ttl, holder, delay, now)
    served(line, id, in_line, next_id)
    return 'ACQUIRED ' .. ttl .. ' ' .. text .. ' ' .. free
  elseif least_delayed then
    return refused(string.format('DELAYED %d', least), line, id, waits, now)
  end
  return refused(string.format('CONTENDED %d', least), line, id, waits, now)
end
