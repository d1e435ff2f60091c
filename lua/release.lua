-- leasehold release (docs/design.md §4): one item of a batch; lua/batch.lua runs it. Atomic,
-- owner-checked.
--
-- lease    lease key ("<owner> <op> <token>")
-- mine     "<owner> <op> "
--
-- Replies (protocol::ReleaseReply):
--   'RELEASED'   held by this attempt; deleted and a notice published on the release
--                channel, "<lease>:released" (protocol::LeaseKeys::release_channel; a
--                counted lease's slot "<name>#<i>" announces on "<name>:released")
--   'ABSENT'     no lease key
--   'NOT_OWNER'  held by someone else; untouched
--
-- The fence counter is left in place: the next holder's token must be greater. A release
-- deletes a lease's lock-delay too (owner.lua), even once the lease ended: its holder says
-- its work is over, which is all the delay waits for.
--
-- The notice is published before the key is deleted: the script is atomic, so no client
-- sees the order, and an ACL that refuses PUBLISH (or a channel) refuses the release
-- before it wrote anything — a NOPERM reply always means the lease is still held, never a
-- release done half-way.

local function release(lease, mine)
  local refusal = not_held(lease, mine)
  if refusal then
    return refusal
  end
  local published = redis.pcall('PUBLISH', channel(lease, ':released'), 'released')
  if type(published) == 'table' and published.err then
    -- Named here: Redis 7.0 does not say which command a script was refused.
    return redis.error_reply('NOPERM PUBLISH to the release channel refused ('
      .. published.err .. '); the lease is still held')
  end
  redis.call('DEL', lease)
  wrote(lease, false)
  return 'RELEASED'
end
