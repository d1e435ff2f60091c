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
-- now     function returning the server's TIME in µs (read at most once per batch)
--
-- Replies, one line of words (status words match protocol::AcquireReply):
--   'ACQUIRED <ttl_ms> <token>'   key was absent; now held by this attempt
--   'REPLAYED <pttl_ms> <token>'  this very attempt holds it; nothing changed (no TTL reset)
--   'CONFLICT <pttl_ms>'          same owner token, other operation id
--   'CONTENDED <pttl_ms>'         another holder; its value never leaves Redis
--
-- Invariant (fencing): token = max(last + 1, server TIME in µs), where last is the largest
-- token the group's counter holds. It is strictly greater than every token issued before
-- for this resource (and its whole group), also after the lease key expired, after the
-- counter was evicted, after a replica promotion that lost the last increment, and for a
-- second acquisition in the same group within one batch (same TIME: last + 1 wins).
-- Tokens stay below 2^53 (the µs clock reaches that in the year 2255), so Lua doubles hold
-- them exactly; '%d' prints them whole.
--
-- Cost: a refusal is two reads (GET, PTTL), none when an earlier item of the call read the
-- key; it creates no string but its reply, and that once per key and call. An acquisition
-- is four calls: GET, SET … GET on the counter (read and write in one), SET … PX on the
-- lease, PUBLISH of the acquisition notice; a fifth only when the clock did not move past
-- the counter.

local function acquire(lease, fence, mine, ttl, holder, now)
  local seen = read(lease)
  if seen then
    local held, left = seen[1], pttl(lease, seen)
    if string.find(held, mine, 1, true) == 1 then
      return string.format('REPLAYED %d %s', left, string.match(held, '%d+$'))
    end
    -- Contenders for one key often share a call: the holder's owner and the refusal are
    -- worked out once per key and call, not once per contender.
    if seen.contended == nil then
      seen.holder = string.match(held, '^[^ ]+ ') or false
      seen.contended = string.format('CONTENDED %d', left)
    end
    if seen.holder and string.find(mine, seen.holder, 1, true) == 1 then
      return string.format('CONFLICT %d', left)
    end
    return seen.contended
  end

  local token = now()
  local text = string.format('%d', token)
  local last = tonumber(redis.call('SET', fence, text, 'GET'))
  if last and last >= token then
    token = last + 1
    text = string.format('%d', token)
    redis.call('SET', fence, text)
  end
  local value = mine .. text
  if holder then
    -- Before the token, which stays the value's last word (inspect reads it there).
    value = mine .. holder .. ' ' .. text
  end
  redis.call('SET', lease, value, 'PX', ttl)
  wrote(lease, {value, tonumber(ttl)})
  -- For observers (LeaseClient::observe). A refusal (an ACL that allows publishing on the
  -- release channel only) costs them their early wake-up, never the acquisition: pcall.
  redis.pcall('PUBLISH', lease .. ':acquired', text)
  return 'ACQUIRED ' .. ttl .. ' ' .. text
end
