-- leasehold inspect (docs/design.md §4): one item of a batch; lua/batch.lua runs it. Read only.
--
-- lease  lease key ("<owner> <op> <token>" or "<owner> <op> <holder> <token>")
-- mine   "<owner> <op> "
--
-- Replies (protocol::InspectReply):
--   'HELD_BY_ATTEMPT <pttl_ms> <token>[ <holder>]'  held by exactly this attempt
--   'HELD_BY_OTHER <pttl_ms> <token>[ <holder>]'    held by someone else; the owner token
--         stays here, the fencing token and the holder label are public
--   'ABSENT'

local function inspect(lease, mine)
  local seen = read(lease)
  if not seen then
    return 'ABSENT'
  end
  local held, left = seen[1], pttl(lease, seen)
  local token = string.match(held, '%d+$') or ''
  local holder = string.match(held, '^%S+ %S+ (%S+) %d+$')
  local status = 'HELD_BY_OTHER'
  if string.find(held, mine, 1, true) == 1 then
    status = 'HELD_BY_ATTEMPT'
  end
  if holder then
    return string.format('%s %d %s %s', status, left, token, holder)
  end
  return string.format('%s %d %s', status, left, token)
end
