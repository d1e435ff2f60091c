-- leasehold acquire (DESIGN §4): one item of a batch; lua/batch.lua runs it. Atomic.
--
-- lease   lease key: the string "<owner> <op> <token>", with a PX expiry
-- fence   fence counter of the lease's group (the hash tag): the last token issued to any
--         lease of the group; no expiry
-- owner   owner token (base64url: no spaces)
-- op      operation id (printable ASCII: no spaces)
-- ttl     ttl in milliseconds (integer text, > 0)
-- now     function returning the server's TIME in µs (read at most once per batch)
--
-- Replies (status words match protocol::AcquireReply):
--   {'ACQUIRED',  ttl_ms,  token}  key was absent; now held by this attempt
--   {'REPLAYED',  pttl_ms, token}  this very attempt holds it; nothing changed (no TTL reset)
--   {'CONFLICT',  pttl_ms}         same owner token, other operation id
--   {'CONTENDED', pttl_ms}         another holder; its value never leaves Redis
--
-- Invariant (fencing): token = max(last + 1, server TIME in µs), where last is the largest
-- token the group's counter holds. It is strictly greater than every token issued before
-- for this resource (and its whole group), also after the lease key expired, after the
-- counter was evicted, after a replica promotion that lost the last increment, and for a
-- second acquisition in the same group within one batch (same TIME: last + 1 wins).
-- Tokens stay below 2^53 (the µs clock reaches that in the year 2255), so Lua doubles hold
-- them exactly; they are returned as Lua numbers, which Redis turns into integer replies.
--
-- Cost: a refusal is two reads (GET, PTTL). An acquisition is three calls: GET, SET … GET
-- on the counter (read and write in one), SET … PX on the lease; a fourth only when the
-- clock did not move past the counter.

local function acquire(lease, fence, owner, op, ttl, now)
  local mine = owner .. ' ' .. op .. ' '
  local held = redis.call('GET', lease)
  if held then
    local pttl = redis.call('PTTL', lease)
    if string.sub(held, 1, #mine) == mine then
      return {'REPLAYED', pttl, tonumber(string.sub(held, #mine + 1))}
    end
    if string.sub(held, 1, #owner + 1) == owner .. ' ' then
      return {'CONFLICT', pttl}
    end
    return {'CONTENDED', pttl}
  end

  local token = now()
  local text = string.format('%d', token)
  local last = tonumber(redis.call('SET', fence, text, 'GET'))
  if last and last >= token then
    token = last + 1
    text = string.format('%d', token)
    redis.call('SET', fence, text)
  end
  redis.call('SET', lease, mine .. text, 'PX', ttl)
  return {'ACQUIRED', tonumber(ttl), token}
end
