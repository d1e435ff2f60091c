-- leasehold inspect (docs/design.md §4): one item of a batch; lua/batch.lua runs it. Read only.
--
-- lease  lease key ("<owner> <op> <token>" or "<owner> <op> <holder> <token>")
-- mine   "<owner> <op> "
-- line   the lease's line ("<name>:line", lua/line.lua; a counted lease's one line), or nil:
--        not read
--
-- Replies (protocol::InspectReply), each with <waiting> second: the line's entries (its
-- ZCARD: a waiter that died is counted until it is dropped from the line), or '-' when the
-- line could not be read (an ACL that refuses ZCARD, a key of another type) or was not:
--   'HELD_BY_ATTEMPT <waiting> <pttl_ms> <token>[ <holder>]'  held by exactly this attempt
--   'HELD_BY_OTHER <waiting> <pttl_ms> <token>[ <holder>]'    held by someone else; the
--         owner token stays here, the fencing token and the holder label are public
--   'DELAYED <waiting> <pttl_ms> <token>[ <holder>]'          not held: the last lease
--         ended unreleased and its lock-delay runs for pttl_ms more (owner.lua), whoever asks
--   'ABSENT <waiting>'

-- The line's entries, or '-' when it cannot be read.
local function waiting(line)
  if not line then
    return '-'
  end
  local n = redis.pcall('ZCARD', line)
  if type(n) ~= 'number' then
    return '-'
  end
  return tostring(n)
end

local function inspect(lease, mine, line)
  local seen = read(lease)
  local count = waiting(line)
  if not seen then
    return 'ABSENT ' .. count
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
    return string.format('%s %s %d %s %s', status, count, left, token, holder)
  end
  return string.format('%s %s %d %s', status, count, left, token)
end
