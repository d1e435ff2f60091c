-- leasehold renew (docs/design.md §4): one item of a batch; lua/batch.lua runs it. Atomic, and
-- idempotent for one attempt, so a renew whose reply was lost can be sent again.
--
-- lease  lease key ("<owner> <op> <token>")
-- mine   "<owner> <op> "
-- ttl    ttl in milliseconds (integer text, > 0)
--
-- Replies (protocol::RenewReply):
--   'RENEWED'    held by this attempt; expiry reset to ttl from now
--   'ABSENT'     no lease key
--   'NOT_OWNER'  held by someone else; untouched

local function renew(lease, mine, ttl)
  local refusal, seen = not_held(lease, mine)
  if refusal then
    return refusal
  end
  redis.call('PEXPIRE', lease, ttl)
  wrote(lease, {seen[1], tonumber(ttl)})
  return 'RENEWED'
end
