-- leasehold release (DESIGN §4): one item of a batch; lua/batch.lua runs it. Atomic,
-- owner-checked.
--
-- lease    lease key ("<owner> <op> <token>")
-- mine     "<owner> <op> "
--
-- Replies (protocol::ReleaseReply):
--   'RELEASED'   held by this attempt; deleted and a notice published on the release
--                channel, "<lease>:released" (protocol::LeaseKeys::release_channel)
--   'ABSENT'     no lease key
--   'NOT_OWNER'  held by someone else; untouched
--
-- The fence counter is left in place: the next holder's token must be greater.

local function release(lease, mine)
  local refusal = not_held(lease, mine)
  if refusal then
    return refusal
  end
  redis.call('DEL', lease)
  wrote(lease, false)
  redis.call('PUBLISH', lease .. ':released', 'released')
  return 'RELEASED'
end
