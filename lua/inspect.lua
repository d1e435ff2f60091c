-- leasehold inspect (docs/design.md §4): one item of a batch; lua/batch.lua runs it. Read only.
--
-- lease  lease key ("<owner> <op> <token>" or "<owner> <op> <holder> <token>")
-- mine   "<owner> <op> "
--
-- Replies (protocol::InspectReply):
--   'HELD_BY_ATTEMPT <pttl_ms> <token>[ <holder>]'  held by exactly this attempt
--   'HELD_BY_OTHER <pttl_ms> <token>[ <holder>]'    held by someone else; the owner token
--         stays here, the fencing token and the holder label are public
--   'DELAYED <pttl_ms> <token>[ <holder>]'          not held: the last lease ended unreleased
--         and its lock-delay runs for pttl_ms more (owner.lua), whoever asks
--   'ABSENT'

local function inspect(lease, mine)
  local seen = read(lease)
  if not seen then
    return 'ABSENT'
  end
  local left, delayed = left_of(lease, seen)
  local token, holder = token_and_holder(seen)
  local status = 'HELD_BY_OTHER'
  if delayed then
    status = 'DELAYED'
  elseif string.find(seen[1], mine, 1, true) == 1 then
    status = 'HELD_BY_ATTEMPT'
  end
  if holder then
    return string.format('%s %d %s %s', status, left, token, holder)
  end
  return string.format('%s %d %s', status, left, token)
end
