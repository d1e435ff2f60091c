-- leasehold's plain path (docs/design.md §4): the batch script's first part (scripts.rs puts
-- this file first, lua/batch.lua last). A call whose items are all plain — acquisitions
-- with no holder label and no lock-delay ('A<ttl_ms> <w><id>', KEYS lease, fence, line),
-- renewals ('N<ttl_ms>', KEYS lease) and releases ('R', KEYS lease) — starts here, before
-- the other files define their functions: a script's functions are made anew on every
-- call (a Lua closure each, and the files define about thirty), which cost a plain cycle
-- more Redis CPU than any of its commands (docs/performance.md).
--
-- Items run here in order while each is simple:
--   * an acquisition that finds the lease free and no line: the lease's GET, the line's
--     EXISTS (no key: no waiter, live or dead), then the token (issue) and the lease's
--     SET, and the acquisition notice; it answers as acquire.lua's 'ACQUIRED'. A waiting
--     acquisition in line already ('=') is not simple: its line is there.
--   * a renewal of a lease without lock-delay (its value ends with its token): as
--     renew.lua's.
--   * a release of a lease that is no counted lease's slot (its key holds no '#'): as
--     release.lua's.
-- The first item that is not simple (an acquisition's lease held or with a line, a lease
-- with a lock-delay, a slot, a head with a label or a lock-delay) or that raises ends
-- this part; lua/batch.lua runs it and the rest, with all functions defined, and is told
-- what this part read of its lease (plain_read, plain_line) and what it raised
-- (plain_raised). An item not simple has only been read here, never written; what the
-- items before it wrote, batch.lua reads from Redis (nothing of it is cached). A call
-- with any other item does not run here at all.

-- The server's TIME in µs, read at most once per call (by now()).
local now_us
local function now()
  if not now_us then
    local t = redis.call('TIME')
    now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return now_us
end

-- Issues the next token of `fence`'s group (acquire.lua's invariant: max(last + 1, server
-- TIME in µs)); returns its text.
local function issue(fence)
  -- A call's first acquisition reads TIME; the others take what it read without a call.
  local token = now_us or now()
  local text = string.format('%d', token)
  local last = tonumber(redis.call('SET', fence, text, 'GET'))
  if last and last >= token then
    token = last + 1
    text = string.format('%d', token)
    redis.call('SET', fence, text)
  end
  return text
end

local replies = {ARGV[1]}
-- The next item's head (its ARGV index) and its first key.
local at, key = 2, 1
-- {lease, its value or false} for the item this part stopped at without running it, and
-- that item's line when this part found the line's key there.
local plain_read, plain_line
-- Whether every item is plain, and the keys are theirs.
local plain = #ARGV % 2 == 1
if plain then
  local keys = 0
  for a = 2, #ARGV, 2 do
    local kind = string.byte(ARGV[a])
    if kind == 65 then -- 'A'
      keys = keys + 3
    elseif kind == 78 or ARGV[a] == 'R' then -- 'N', 'R'
      keys = keys + 1
    else
      plain = false
      break
    end
  end
  plain = plain and keys == #KEYS
end

local function run_plain()
  local last = #ARGV
  while at <= last do
    local head, mine, lease = ARGV[at], ARGV[at + 1], KEYS[key]
    if string.byte(head) == 65 then
      local ttl, w = string.match(head, '^A(%d+) ([+=-])%x+$')
      if not ttl then
        return
      end
      local held = redis.call('GET', lease)
      -- A waiter in line already ('=') finds its line there: acquire.lua reads it.
      if held or w == '=' then
        plain_read = {lease, held}
        return
      elseif redis.pcall('EXISTS', KEYS[key + 2]) ~= 0 then
        plain_read, plain_line = {lease, held}, KEYS[key + 2]
        return
      end
      local text = issue(KEYS[key + 1])
      redis.call('SET', lease, mine .. text, 'PX', ttl)
      redis.pcall('PUBLISH', lease .. ':acquired', text)
      replies[#replies + 1] = 'ACQUIRED ' .. ttl .. ' ' .. text
      key = key + 3
    else
      local renews = string.byte(head) == 78
      if not renews and string.find(lease, '#', 1, true) then
        return
      end
      local held = redis.call('GET', lease)
      if not held then
        replies[#replies + 1] = 'ABSENT'
      elseif string.find(held, mine, 1, true) ~= 1 then
        replies[#replies + 1] = 'NOT_OWNER'
      elseif renews then
        -- A lock-delay's suffix ' d<digits>' is within the value's last 10 bytes; a value
        -- without one ends with its 16-digit token (owner.lua).
        if string.find(held, ' d', -10, true) then
          plain_read = {lease, held}
          return
        end
        redis.call('PEXPIRE', lease, string.sub(head, 2))
        replies[#replies + 1] = 'RENEWED'
      else
        redis.call('DEL', lease)
        redis.pcall('PUBLISH', lease .. ':released', 'released')
        replies[#replies + 1] = 'RELEASED'
      end
      key = key + 1
    end
    at = at + 2
  end
end

-- What the item at `at` raised here, if it did (false: nothing).
local plain_raised = false
if plain then
  local ok, raised = pcall(run_plain)
  if not ok then
    plain_raised = {raised}
  elseif at > #ARGV then
    -- One string, a line per reply (lua/batch.lua says why).
    return table.concat(replies, '\n')
  end
end
