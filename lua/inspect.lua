-- leasehold inspect (DESIGN §4): one item of a batch; lua/batch.lua runs it. Read only.
--
-- lease  lease key ("<owner> <op> <token>")
-- owner  owner token
-- op     operation id
--
-- Replies (protocol::InspectReply):
--   {'HELD_BY_ATTEMPT', pttl_ms, token}  held by exactly this attempt
--   {'HELD_BY_OTHER',   pttl_ms, token}  held by someone else; the owner token stays here,
--                                        the fencing token is public (effect targets compare it)
--   {'ABSENT'}

local function inspect(lease, owner, op)
  local held = redis.call('GET', lease)
  if not held then
    return {'ABSENT'}
  end
  local pttl = redis.call('PTTL', lease)
  local token = tonumber(string.match(held, ' (%d+)$'))
  local mine = owner .. ' ' .. op .. ' '
  if string.sub(held, 1, #mine) == mine then
    return {'HELD_BY_ATTEMPT', pttl, token}
  end
  return {'HELD_BY_OTHER', pttl, token}
end
