-- Podium's Lua sandbox, run once when a worker thread's Lua state is created (chunk
-- "=podium_sandbox"). Arguments: the error unwrapper (Rust) and the names to remove.
--
-- Redis 7.0 patches its Lua so that tables can be flagged read-only; Podium runs the stock
-- Lua 5.1 interpreter, so the same protection is built from proxies: every table a script
-- can reach from the globals (the globals themselves, `string`, `math`, `redis` ...) is an
-- empty table whose metatable reads through to the real one and refuses writes. The few
-- functions that bypass metatables (rawset, setmetatable, getmetatable, next, pairs, rawget,
-- table.insert, table.foreach) are wrapped to see through or refuse a proxy. The real
-- tables stay out of reach (no debug library, no getfenv), so nothing a script does can
-- outlive it. The thread's global table becomes the globals proxy itself, so functions
-- compiled later (scripts, loadstring) see it as their environment.
local unwrap, removed, gc_touched, register_function = ...
local killed = rawget(_G, '__podium_killed')
rawset(_G, '__podium_killed', nil)
local real_globals = _G
local READONLY = "Attempt to modify a readonly table"
local type, tostring, error = type, tostring, error
local rawset, rawget, next, pairs = rawset, rawget, next, pairs
local setmetatable, getmetatable = setmetatable, getmetatable
local pcall, xpcall, loadstring, load = pcall, xpcall, loadstring, load
local insert, foreach = table.insert, table.foreach
local byte = string.byte
local set_thread_globals = setfenv

-- proxy -> the table it stands for; proxy -> what getmetatable shows for it.
local target, shown_metatable = {}, {}

local function refuse_write()
  error(READONLY, 2)
end

local function protect(real)
  local proxy = setmetatable({}, { __index = real, __newindex = refuse_write })
  target[proxy] = real
  return proxy
end

for _, name in ipairs(removed) do
  real_globals[name] = nil
end

-- Reading a global that does not exist is an error (Redis 7.0), reported at the script's line.
local function missing_global(_, name)
  error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
end
setmetatable(real_globals, { __index = missing_global })

-- pcall / xpcall hand a failed redis.call's error to Lua code as Redis 7.0 does (pcall: the
-- error's text; an xpcall handler: the {err=...} table), not as the host error object it
-- travels as.
-- A script SCRIPT KILL stopped cannot catch that: the error goes on up.
-- The results pass through as varargs (no table and unpack in between), so a call returns as
-- many values as under Redis's own pcall (unpack would stop near Lua's 8,000-slot C limit).
local function after_pcall(ok, ...)
  if ok then return true, ... end
  local e = ...
  if killed() then error(e, 0) end
  return false, unwrap(e, false)
end
real_globals.pcall = function(...)
  return after_pcall(pcall(...))
end
real_globals.xpcall = function(f, handler)
  local kill_error
  local function after_xpcall(...)
    if kill_error ~= nil then error(kill_error, 0) end
    return ...
  end
  return after_xpcall(xpcall(f, function(e)
    if killed() then kill_error = e return e end
    return handler(unwrap(e, true))
  end))
end

local collectgarbage = collectgarbage
real_globals.collectgarbage = function(opt, arg)
  if opt == 'stop' or opt == 'setpause' or opt == 'setstepmul' then gc_touched[1] = true end
  return collectgarbage(opt, arg)
end

real_globals.rawset = function(t, k, v)
  if target[t] ~= nil then error(READONLY, 0) end
  local r = rawset(t, k, v)
  return r
end
real_globals.rawget = function(t, k)
  local v = rawget(target[t] or t, k)
  return v
end
real_globals.setmetatable = function(t, mt)
  if target[t] ~= nil then error(READONLY, 0) end
  local r = setmetatable(t, mt)
  return r
end
local string_metatable_view
real_globals.getmetatable = function(v)
  if type(v) == 'string' then return string_metatable_view end
  if target[v] ~= nil then return shown_metatable[v] end
  local mt = getmetatable(v)
  return mt
end
local function see_through_next(t, k)
  return next(target[t] or t, k)
end
real_globals.next = see_through_next
real_globals.pairs = function(t)
  if target[t] ~= nil then return see_through_next, t, nil end
  return pairs(t)
end
table.insert = function(t, ...)
  if target[t] ~= nil then error(READONLY, 0) end
  return insert(t, ...)
end
table.foreach = function(t, f)
  return foreach(target[t] or t, f)
end

-- No bytecode: Redis 7.0's Lua parses every chunk as text, so a binary chunk (first byte
-- ESC) fails in the lexer on that byte. The lexer given a blank and the ESC (text, since the
-- first byte is not ESC) fails the same way, with the same message.
local LEXER_ESC = " \27"
real_globals.loadstring = function(s, chunkname)
  if type(s) == 'string' and byte(s, 1) == 27 then
    return loadstring(LEXER_ESC, chunkname or s)
  end
  return loadstring(s, chunkname)
end
real_globals.load = function(reader, chunkname)
  if type(reader) ~= 'function' then return load(reader, chunkname) end
  local first, ended = true, false
  local function text_only()
    if ended then return nil end
    local piece = reader()
    if first then
      first = false
      if (type(piece) == 'string' or type(piece) == 'number') and byte(piece, 1) == 27 then
        ended = true
        return LEXER_ESC
      end
    end
    return piece
  end
  return load(text_only, chunkname)
end

local real_redis_table = rawget(real_globals, 'redis')

-- The libraries and the redis table become read-only views.
for _, name in ipairs({ 'string', 'math', 'table', 'coroutine', 'redis', 'bit', 'cjson',
                        'struct', 'cmsgpack' }) do
  local lib = rawget(real_globals, name)
  if type(lib) == 'table' then
    rawset(real_globals, name, protect(lib))
  end
end
string_metatable_view = protect({ __index = rawget(real_globals, 'string') })

-- What a library's code sees while FUNCTION LOAD runs it (Redis 7.0's library API).
local real_redis = real_redis_table
local library_redis = {
  register_function = register_function,
  log = real_redis.log,
  LOG_DEBUG = real_redis.LOG_DEBUG, LOG_VERBOSE = real_redis.LOG_VERBOSE,
  LOG_NOTICE = real_redis.LOG_NOTICE, LOG_WARNING = real_redis.LOG_WARNING,
  REDIS_VERSION = real_redis.REDIS_VERSION, REDIS_VERSION_NUM = real_redis.REDIS_VERSION_NUM,
}
setmetatable(library_redis, { __index = missing_global })
local library_api = setmetatable({ redis = protect(library_redis) }, { __index = missing_global })

-- The globals themselves: what getmetatable(_G) shows is a read-only table like Redis's.
local globals = protect(real_globals)
shown_metatable[globals] = protect({ __index = missing_global })
rawset(real_globals, '_G', globals)
set_thread_globals(0, globals)

return getmetatable(globals), library_api, real_globals
