-- leasehold ownership check, shared by renew.lua and release.lua (scripts.rs puts this
-- file first).
--
-- lease  lease key ("<owner> <op> <token>")
-- owner  owner token
-- op     operation id
--
-- Returns nil when the lease is held by exactly this attempt; otherwise the reply that
-- says why not: {'ABSENT'} (no lease key) or {'NOT_OWNER'} (held by someone else).

local function not_held(lease, owner, op)
  local held = redis.call('GET', lease)
  if not held then
    return {'ABSENT'}
  end
  local mine = owner .. ' ' .. op .. ' '
  if string.sub(held, 1, #mine) ~= mine then
    return {'NOT_OWNER'}
  end
  return nil
end
