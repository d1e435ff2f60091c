-- leasehold renew (docs/design.md §4): one item of a batch; lua/batch.lua runs it. Atomic, and
-- idempotent for one attempt, so a renew whose reply was lost can be sent again.
--
-- lease  lease key ("<owner> <op> <token>")
-- mine   "<owner> <op> "
-- ttl    ttl in milliseconds (integer text, > 0)
--
-- Replies (protocol::RenewReply):
--   'RENEWED'    held by this attempt; expiry reset to ttl from now (and the key's to ttl
--                plus the lock-delay, for a lease with one)
--   'ABSENT'     no lease key, or only its lock-delay: the lease ended (owner.lua)
--   'NOT_OWNER'  held by someone else; untouched

local function renew(lease, mine, ttl)
  local refusal, seen = not_held(lease, mine)
  if refusal then
    return refusal
  end
  local px, delay = tonumber(ttl), delay_of(seen)
  if delay > 0 then
    -- A lease with a lock-delay is renewed only while it has not ended: a renewal must
    -- not bring back a lease whose holder others were told had lost it.
    local _, ended = left_of(lease, seen)
    if ended then
      return 'ABSENT'
    end
    px = px + delay
  end
  redis.call('PEXPIRE', lease, px)
  wrote(lease, {seen[1], px})
  return 'RENEWED'
end
