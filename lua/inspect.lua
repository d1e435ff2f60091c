-- leasehold inspect (docs/design.md §4): one item of a batch; lua/batch.lua runs it. Read only.
--
-- lease  lease key ("<owner> <op> <token>")
-- mine   "<owner> <op> "
--
-- Replies (protocol::InspectReply):
--   'HELD_BY_ATTEMPT <pttl_ms> <token>'  held by exactly this attempt
--   'HELD_BY_OTHER <pttl_ms> <token>'    held by someone else; the owner token stays here,
--                                        the fencing token is public (effect targets compare it)
--   'ABSENT'

local function inspect(lease, mine)
  local seen = read(lease)
  if not seen then
    return 'ABSENT'
  end
  local held, left = seen[1], pttl(lease, seen)
  local token = string.match(held, '%d+$') or ''
  if string.find(held, mine, 1, true) == 1 then
    return string.format('HELD_BY_ATTEMPT %d %s', left, token)
  end
  return string.format('HELD_BY_OTHER %d %s', left, token)
end
