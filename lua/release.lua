-- leasehold release (docs/design.md §4): one item of a batch; lua/batch.lua runs it. Atomic,
-- owner-checked.
--
-- lease    lease key ("<owner> <op> <token>")
-- mine     "<owner> <op> "
--
-- Replies (protocol::ReleaseReply):
--   'RELEASED'   held by this attempt; deleted, and a notice published (best effort) on the
--                release channel, "<lease>:released" (protocol::LeaseKeys::release_channel; a
--                counted lease's slot "<name>#<i>" announces on "<name>:released")
--   'ABSENT'     no lease key
--   'NOT_OWNER'  held by someone else; untouched
--
-- The fence counter is left in place: the next holder's token must be greater. A release
-- deletes a lease's lock-delay too (owner.lua), even once the lease ended: its holder says
-- its work is over, which is all the delay waits for.
--
-- The key is deleted first and the notice published after, by pcall: the notice only wakes
-- waiters early (they look again within 750 ms anyway: src/lease/wait.rs), so an ACL that
-- refuses PUBLISH (or the channel) costs them that wake-up, never the release — as for the
-- acquisition notice (acquire.lua). A NOPERM reply means the key itself was refused, and
-- nothing was written.

local function release(lease, mine)
  local seen = known[lease]
  local held = seen and seen[1]
  if seen == nil then
    -- Not read by this call (the common case): read here, and nothing kept (no table
    -- made), since a later item that asks reads it from Redis.
    held = redis.call('GET', lease)
  end
  if not held then
    return 'ABSENT'
  elseif string.find(held, mine, 1, true) ~= 1 then
    return 'NOT_OWNER'
  end
  redis.call('DEL', lease)
  if seen then
    wrote(lease, false)
  end
  redis.pcall('PUBLISH', channel(lease, ':released'), 'released')
  return 'RELEASED'
end
