-- leasehold renew (DESIGN §4): one item of a batch; lua/batch.lua runs it. Atomic, and
-- idempotent for one attempt, so a renew whose reply was lost can be sent again.
--
-- lease  lease key ("<owner> <op> <token>")
-- owner  owner token
-- op     operation id
-- ttl    ttl in milliseconds
--
-- Replies (protocol::RenewReply):
--   {'RENEWED'}    held by this attempt; expiry reset to ttl from now
--   {'ABSENT'}     no lease key
--   {'NOT_OWNER'}  held by someone else; untouched

local function renew(lease, owner, op, ttl)
  local refusal = not_held(lease, owner, op)
  if refusal then
    return refusal
  end
  redis.call('PEXPIRE', lease, ttl)
  return {'RENEWED'}
end
