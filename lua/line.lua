-- leasehold's line of waiters (docs/design.md §4, "The line"): who may take a free lease
-- (a slot of a counted lease), first come, first served; lua/acquire.lua asks it.
--
-- line    "<name>:line", a sorted set per lease (a counted lease's: per lease, not per
--         slot; protocol::LeaseKeys::line): its members are waiter ids (16 hex digits, a
--         digest of the attempt: protocol::WaiterId, so a replay keeps its place), each
--         scored by the server's TIME in µs when it joined. Equal scores are ordered by
--         the member, which is how the server breaks a tie. The key lives LINE_PX past its
--         creation or the last keep-alive that extended it (keep), longer than any wait (an
--         hour at most): a line whose waiters all went is gone by then. A waiter id is its client's line session (16 hex digits)
--         then its attempt's part (16 more).
-- alive   "<line>:<session>": the keep-alive of a line session's waiters, SET with PX
--         KEEP_MS by the session (lua/batch.lua's keep item, every LINE_KEEP_EVERY of
--         src/protocol/line.rs) while its client has waiters in the line: one write per
--         client, however many of its waiters wait.
-- turn    "<line>:<session>": the channel on which a line session's waiters are told
--         their turn, each by its id as the message (one subscription per client).
--
-- An ACL that refuses the sorted-set commands (one written for leasehold before the line)
-- leaves the line out: every acquisition then behaves as with an empty line, as before
-- the line existed. The line's first read and its join are pcall'ed for that.
--
-- An entry is alive while its session's keep-alive key lives, or for KEEP_US after it
-- joined (so that joining costs no keep-alive write). A dead entry is removed by the next
-- call that finds it at the head of the line while the lease is free: a waiter whose
-- client died (killed, frozen, dropped) blocks the line for KEEP at most after the
-- session's last sign of life. A waiter whose wait ends leaves the line itself (leave).

local KEEP_US = 2000000
local KEEP_MS = '2000'
local LINE_PX = '3660000'
-- Dead entries one call removes at most, so that its run time stays bounded; the next
-- call removes more.
local PRUNE_MAX = 64

-- Whether the entry `id` of `line`, which joined at `joined` (µs), is alive.
local function alive(line, id, joined, now)
  if now() - joined < KEEP_US then
    return true
  end
  return redis.call('GET', line .. ':' .. string.sub(id, 1, 16)) ~= false
end

-- The line session `session` keeps its waiters in `line` alive; with `extend`, the line
-- too: it lives LINE_PX past the last such keep of any live session (every eighth beat of
-- src/lease/line_keeper.rs), and past its creation.
local function keep(line, session, extend)
  redis.call('SET', line .. ':' .. session, '1', 'PX', KEEP_MS)
  if extend then
    redis.pcall('PEXPIRE', line, LINE_PX)
  end
  return 'KEPT'
end

-- Whether the waiter `id` may take one of `free` (>= 1) free slots of a lease of
-- `permits` slots: it is among the first `free` live entries of `line`, or it is not in
-- the line and the line holds fewer than `free` live entries. Dead entries met before
-- `id` or the `free`-th live entry are removed. When `id` may and is in the line, also
-- returns true and the entry that will be at rank permits - 1 once `id` left (the one to
-- tell its turn), if any.
--
-- `probe`: look for the line's key first (EXISTS), for an acquisition that may find none.
--
-- Cost: with `probe`, one EXISTS when there is no line (most free leases have none: a line
-- lives only while someone waits, and LINE_PX after); else (that EXISTS and) one ZRANGE
-- for an empty line or a waiter at the head, plus a GET per entry ahead of it that joined
-- more than KEEP ago (each such one found dead, a ZREM).
local function entitled(line, id, free, permits, now, probe)
  -- No line key: no live waiter, and `id` is not in it. (An EXISTS costs Redis less than
  -- the ZRANGE below, which builds a reply table even for an absent key. A refused EXISTS
  -- falls through to the ZRANGE, which decides as before.) Not `probe`: the caller knows
  -- the line is likely there, and the ZRANGE alone decides.
  if probe and redis.pcall('EXISTS', line) == 0 then
    return true, false
  end
  local pruned = 0
  while true do
    local entries = redis.pcall('ZRANGE', line, 0, permits, 'WITHSCORES')
    if entries.err then
      return true, false
    end
    local live, dead = 0, 0
    for i = 1, #entries, 2 do
      local other = entries[i]
      if other == id then
        if live >= free then
          return false
        end
        -- Unless entries were removed, the one at rank `permits` now moves to
        -- `permits - 1`; otherwise it is read again.
        local next_id = entries[2 * permits + 1]
        if dead > 0 then
          next_id = redis.call('ZRANGE', line, permits, permits)[1]
        end
        return true, true, next_id
      end
      if live >= free then
        return false
      end
      if alive(line, other, tonumber(entries[i + 1]), now) then
        live = live + 1
      else
        redis.call('ZREM', line, other)
        dead = dead + 1
      end
    end
    pruned = pruned + dead
    -- The whole line was read (fewer entries than asked for): `id` is not in it.
    if #entries < 2 * (permits + 1) then
      return live < free, false
    end
    -- Read in full with entries removed (nothing else ends a full read here): read on,
    -- unless this call removed enough.
    if dead == 0 or pruned >= PRUNE_MAX then
      return false
    end
  end
end

-- Puts the waiter `id` in `line` or finds it there; returns its rank (0 for the head),
-- or nil without a line (an ACL that refuses the sorted-set commands). A newcomer joins at
-- the tail, scored max(tail's score + 1, TIME) as a fencing token is: after a failover to
-- a node whose clock is behind it still goes behind every waiter there, and no two
-- entries tie (a ZSET orders equal scores by member, not by arrival). Finding it reads no
-- TIME and writes nothing: its session keeps it alive. `first`: the wait's first try,
-- which joins at once (ZADD NX: a replay of it finds its place) rather than looking for
-- its place first. The join that makes the line sets its expiry; the waiting sessions'
-- keep-alives extend it (keep).
local function wait_in_line(line, id, now, first)
  if not first then
    local rank = redis.pcall('ZRANK', line, id)
    if type(rank) == 'table' then
      return nil
    elseif rank then
      return rank
    end
  end
  local tail = redis.pcall('ZRANGE', line, -1, -1, 'WITHSCORES')
  if tail.err then
    return nil
  end
  local score = now()
  if tail[2] then
    score = math.max(score, tonumber(tail[2]) + 1)
  end
  local added = redis.pcall('ZADD', line, 'NX', string.format('%d', score), id)
  if type(added) == 'table' then
    return nil
  end
  if added == 1 and not tail[1] then
    -- The first entry of a line it made.
    redis.call('PEXPIRE', line, LINE_PX)
    return 0
  end
  return redis.call('ZRANK', line, id)
end

-- Tells the waiter `id` its turn, on its session's channel.
local function tell_turn(line, id)
  redis.pcall('PUBLISH', line .. ':' .. string.sub(id, 1, 16), id)
end

-- `id` took a slot: it leaves the line, and the entry next in line is told its turn.
local function served(line, id, in_line, next_id)
  if in_line then
    redis.call('ZREM', line, id)
  end
  if next_id then
    tell_turn(line, next_id)
  end
end

-- The waiter `id` leaves `line`: its wait ended without the lease. The waiter that moves
-- up to rank permits - 1 by it, if any, is told its turn.
local function leave(line, id, permits)
  local rank = redis.pcall('ZRANK', line, id)
  if type(rank) == 'number' then
    redis.call('ZREM', line, id)
    if rank < permits then
      local next_id = redis.call('ZRANGE', line, permits - 1, permits - 1)[1]
      if next_id then
        tell_turn(line, next_id)
      end
    end
  end
  return 'LEFT'
end
