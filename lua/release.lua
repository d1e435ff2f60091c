-- leasehold release (DESIGN §4): one item of a batch; lua/batch.lua runs it. Atomic,
-- owner-checked.
--
-- lease    lease key ("<owner> <op> <token>")
-- owner    owner token
-- op       operation id
-- channel  release channel (shares the key's hash tag; published to, not stored)
--
-- Replies (protocol::ReleaseReply):
--   {'RELEASED'}   held by this attempt; deleted and a notice published on the channel
--   {'ABSENT'}     no lease key
--   {'NOT_OWNER'}  held by someone else; untouched
--
-- The fence counter is left in place: the next holder's token must be greater.

local function release(lease, owner, op, channel)
  local refusal = not_held(lease, owner, op)
  if refusal then
    return refusal
  end
  redis.call('DEL', lease)
  redis.call('PUBLISH', channel, 'released')
  return {'RELEASED'}
end
