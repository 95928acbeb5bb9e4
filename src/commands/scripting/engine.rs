//! The Lua engine: one long-lived Lua 5.1 state per worker thread, holding the sandbox and
//! the compiled scripts.
//!
//! A state is created the first time a thread runs a script (and again after SCRIPT FLUSH,
//! which bumps [`super::Scripts`]'s generation): its own allocator, the base, string, table
//! and math libraries, the `redis` table, the libraries Redis embeds, then the sandbox
//! (`sandbox.lua`), which makes every table a script can reach read-only and takes out the
//! globals Redis 7.0 removes. A script is compiled once per state, under the name Redis gives
//! it (`@user_script`), and kept by SHA; a call sets `KEYS` and `ARGV` and runs the compiled
//! function under the error handler. `redis.call` reaches the running command's context
//! through [`Engine::current`], set only while a script runs.
//!
//! Memory: the state allocates through [`lua_alloc`], which hands an allocation failure back
//! to Lua (a "not enough memory" error for that script) instead of aborting the process, as
//! mlua's allocator (and the default Rust allocation path) would.

use super::convert::lua_to_reply;
use super::error::{command_error, lua_message, CommandError};
use super::register::Loading;
use super::Invocation;
use crate::alloc::defrag::SideHeap;
use crate::protocol::Reply;
use hashbrown::HashMap;
use mlua::{ffi, Function, Lua, MultiValue, StdLib, Table, Value as LuaValue};
use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void};
use std::mem::ManuallyDrop;
use std::rc::Rc;

/// How long a library's code may run in FUNCTION LOAD (Redis's LOAD_TIMEOUT_MS).
const LOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// A script that has run this long on a runtime worker hands the worker's other work to
/// another thread (see [`hand_off_worker`]); later attempts follow at 4x the running time.
const FIRST_HANDOFF: std::time::Duration = std::time::Duration::from_millis(2);

/// How long a hand-off waits for the replacement thread to take the worker over.
const HANDOFF_WAIT: std::time::Duration = std::time::Duration::from_millis(1);

/// Lua 5.1's default collector pace (restored after a script changed it).
const LUA_GC_PAUSE: std::ffi::c_int = 200;
const LUA_GC_STEPMUL: std::ffi::c_int = 200;

/// Alignment of every block handed to Lua: mlua's own (16 on 64-bit targets, what malloc
/// guarantees), so that either allocator can free the other's blocks (see Engine::new).
const LUA_ALIGN: usize = ffi::SYS_MIN_ALIGN;

/// Globals Redis 7.0.15 does not give scripts (checked against redis-server 7.0.15: reading
/// any of them is "Script attempted to access nonexistent global variable").
const REMOVED_GLOBALS: &[&str] = &[
    "dofile", "loadfile", "print", "getfenv", "setfenv", "newproxy", "module", "require",
];

/// The largest single block a script may ask for (4 GiB, eight times the largest string a
/// client can send under the default `proto-max-bulk-len`).
#[cfg(not(fuzzing))]
const MAX_LUA_BLOCK: usize = 1 << 32;

/// Fuzz builds (`--cfg fuzzing`, set by cargo-fuzz) refuse blocks over 256 MiB: libFuzzer
/// reports any single malloc over its limit (2 GiB) as a finding, and a script asking for a
/// huge string is Redis's behaviour, not a bug. Smaller blocks also exercise the failure path
/// far more often.
#[cfg(fuzzing)]
const MAX_LUA_BLOCK: usize = 1 << 28;

/// How often (in Lua instructions) the hook looks for SCRIPT KILL.
#[cfg(not(fuzzing))]
const HOOK_EVERY: u32 = 10_000;

/// Fuzz builds look ten times as often, to hold scripts to the fuzz budget.
#[cfg(fuzzing)]
const HOOK_EVERY: u32 = 1_000;

/// Fuzz builds only: a script may run 200,000 Lua instructions (and 100 ms, for time spent
/// inside library functions), and the process may hold 512 MiB while it runs. An endless
/// loop, or a loop that grows the keyspace without end, is legitimate in Redis (only SCRIPT
/// KILL or SHUTDOWN NOSAVE stop it), so without a budget the fuzzer would report it as a hang
/// or an out-of-memory. Counting instructions keeps runs deterministic on a loaded machine.
/// Memory is what [`crate::alloc::used_memory`] counts (the fuzz targets install the counting
/// system allocator).
#[cfg(fuzzing)]
fn over_fuzz_budget(started: Option<std::time::Instant>) -> bool {
    const FUZZ_HOOK_CALLS: u32 = 200;
    const FUZZ_TIME: std::time::Duration = std::time::Duration::from_millis(100);
    const FUZZ_MEMORY: usize = 512 << 20;
    let calls = FUZZ_HOOK_CALLS_SEEN.with(|c| {
        c.set(c.get() + 1);
        c.get()
    });
    calls > FUZZ_HOOK_CALLS
        || started.is_some_and(|t| t.elapsed() > FUZZ_TIME)
        || crate::alloc::used_memory() > FUZZ_MEMORY
}

#[cfg(fuzzing)]
thread_local! {
    /// Hook calls in the running script (fuzz builds; reset by Engine::run).
    static FUZZ_HOOK_CALLS_SEEN: Cell<u32> = const { Cell::new(0) };
}

/// The allocator of every script Lua state. Lua 5.1's contract: `nsize == 0` frees,
/// otherwise (re)allocate, and return NULL on failure, which Lua raises as a memory error in
/// the running script. Blocks come from the engine's side heap (`ud`, see
/// [`crate::alloc::defrag::SideHeap`]: out of the keyspace's slabs, where the defragmenter
/// cannot move them) or, without jemalloc, the global allocator; both are counted in INFO's
/// used_memory.
///
/// # Safety
/// Called by Lua only, with pointers this function returned and their sizes.
unsafe extern "C-unwind" fn lua_alloc(
    ud: *mut c_void,
    ptr: *mut c_void,
    osize: usize,
    nsize: usize,
) -> *mut c_void {
    use std::alloc::{alloc, dealloc, realloc, Layout};
    // SAFETY: `ud` is null or the engine's side heap, which outlives its state (Engine's
    // field, dropped after the state is closed) and is only used on the engine's thread.
    let side = unsafe { ud.cast::<SideHeap>().as_ref() };
    if nsize == 0 {
        if !ptr.is_null() {
            // SAFETY: `ptr` came from this allocator (or mlua's, which serves the global
            // allocator's blocks at the same alignment) with size `osize` (Lua's contract).
            unsafe {
                match side {
                    Some(h) => h.free(ptr.cast(), osize),
                    None => dealloc(
                        ptr as *mut u8,
                        Layout::from_size_align_unchecked(osize, LUA_ALIGN),
                    ),
                }
            };
        }
        return std::ptr::null_mut();
    }
    // A block this large is never a real script's need but a corrupted size (with overcommit
    // the system would grant it and the process die when it is touched): fail it softly.
    if nsize > MAX_LUA_BLOCK {
        return std::ptr::null_mut();
    }
    let Ok(layout) = Layout::from_size_align(nsize, LUA_ALIGN) else {
        return std::ptr::null_mut();
    };
    if let Some(h) = side {
        // SAFETY: as above; a non-zero size; a NULL result leaves the old block valid.
        return unsafe {
            if ptr.is_null() {
                h.alloc(nsize).cast()
            } else {
                h.realloc(ptr.cast(), osize, nsize).cast()
            }
        };
    }
    if ptr.is_null() {
        // SAFETY: `layout` has a non-zero size.
        unsafe { alloc(layout) as *mut c_void }
    } else {
        // SAFETY: `ptr` came from this allocator with size `osize`; `nsize` is non-zero and
        // fits a Layout (checked above). A NULL result leaves the old block valid, as Lua
        // expects.
        unsafe {
            realloc(
                ptr as *mut u8,
                Layout::from_size_align_unchecked(osize, LUA_ALIGN),
                nsize,
            ) as *mut c_void
        }
    }
}

thread_local! {
    static ENGINE: RefCell<Option<Engine>> = const { RefCell::new(None) };
}

/// Which server's scripts (and which SCRIPT FLUSH generation) a thread's state was built for.
#[derive(PartialEq, Eq, Clone, Copy)]
pub(super) struct EngineId {
    pub(super) scripts_addr: usize,
    pub(super) generation: u64,
}

/// Drop this thread's Lua state if it is not the one `id` names (SCRIPT FLUSH made it stale).
/// Without this a flushed state, with every script it compiled, stays allocated until the
/// thread next runs a script; Redis frees its state at the flush.
pub(super) fn drop_stale(id: EngineId) {
    let _ = ENGINE.try_with(|cell| {
        if let Ok(mut slot) = cell.try_borrow_mut() {
            if slot.as_ref().is_some_and(|e| e.id != id) {
                *slot = None;
            }
        }
    });
}

/// Run `f` with this thread's engine for `id`, creating it (or replacing a stale one) first.
pub(super) fn with_engine<R>(id: EngineId, f: impl FnOnce(&mut Engine) -> R) -> Result<R, String> {
    ENGINE.with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return Err("ERR the Lua engine is busy on this thread".to_string());
        };
        if slot.as_ref().is_none_or(|e| e.id != id || e.poisoned) {
            // Drop the old state before building the new one.
            *slot = None;
            *slot = Some(Engine::new(id)?);
        }
        match slot.as_mut() {
            Some(engine) => Ok(f(engine)),
            None => Err("ERR the Lua engine could not be created".to_string()),
        }
    })
}

/// The pointer `redis.call` finds the running script's context through.
type Current = Rc<Cell<*mut Invocation<'static, 'static, 'static>>>;

/// Everything that holds references into the Lua state (dropped before it is closed).
struct Handles {
    /// Compiled scripts by SHA, with each one's registry reference (see [`RawRefs`]).
    /// Keyed by the SHA's 40 hex digits inline (no allocation per script: a block per name
    /// would sit among the keyspace's in the allocator's slabs, out of the defragmenter's
    /// reach, as this map lives in a worker's thread).
    functions: HashMap<[u8; 40], (Function, c_int)>,
    /// Where a raw run leaves its two results (`[1]` ok, `[2]` value).
    result_slot: Table,
    /// Field names a returned table is read by.
    reply_keys: super::convert::ReplyKeys,
    /// The real global table behind the read-only view (KEYS and ARGV are set in it).
    hidden_globals: Table,
    /// Lua's own xpcall (not the script-visible wrapper).
    xpcall: Function,
    /// The error handler: Redis's `__redis__err__handler`.
    handler: Function,
    /// The metatable of the globals view: its `__index` is switched to `library_api` while a
    /// FUNCTION LOAD runs a library's code.
    globals_metatable: Table,
    /// What a library's top-level code sees (`redis.register_function`, `redis.log` ...).
    library_api: Table,
    /// The real globals a script sees (the normal `__index` of `globals_metatable`).
    script_api: Table,
    /// FUNCTION libraries loaded in this state: name -> (load id, callbacks by name).
    libraries: HashMap<String, (u64, HashMap<String, Function>)>,
    /// `[1]` is set by the sandbox's collectgarbage when a script stopped the collector or
    /// changed its pace.
    gc_touched: Table,
    lua: Lua,
}

/// What `Engine::build` sets up.
struct Built {
    libs: super::libs::LibState,
    result_slot: Table,
    reply_keys: super::convert::ReplyKeys,
    raw: RawRefs,
    hidden_globals: Table,
    xpcall: Function,
    handler: Function,
    globals_metatable: Table,
    library_api: Table,
    gc_touched: Table,
}

pub(super) struct Engine {
    id: EngineId,
    /// The embedded libraries' settings, reset after every call.
    libs: super::libs::LibState,
    handles: ManuallyDrop<Handles>,
    current: Current,
    loading: Loading,
    /// When the running FUNCTION LOAD started (None when none runs).
    load_started: Rc<Cell<Option<std::time::Instant>>>,
    /// When the running script started and when it next offers its worker's tasks to
    /// another thread.
    run_started: Rc<RunClock>,
    /// The allocator mlua created the state with (function and user data), put back before
    /// the state is closed so that mlua frees its own bookkeeping.
    mlua_alloc: (ffi::lua_Alloc, usize),
    /// What an EVAL run reaches the state through without mlua (see [`run_raw`]).
    raw: RawRefs,
    /// A run panicked inside the engine (see [`Engine::run`]): the state is replaced before
    /// the next script on this thread.
    poisoned: bool,
    /// The heap the state allocates from (see [`lua_alloc`]); a field after the handles, so
    /// dropped after the state is closed.
    _side: Option<Box<SideHeap>>,
}

/// The engine's state and the registry references of what every EVAL run pushes: a run goes
/// straight through `lua_cpcall` instead of mlua's `exec_raw`, which pushed its arguments
/// through the reference thread and wrapped the call in a protected call of its own with two
/// fresh C closures (garbage for the collector on every EVAL).
#[derive(Clone, Copy)]
struct RawRefs {
    state: *mut ffi::lua_State,
    globals: c_int,
    handler: c_int,
    result: c_int,
    /// The strings "KEYS" and "ARGV": fetched by reference, not interned again (hashed and
    /// looked up) four times per run.
    names: (c_int, c_int),
}

/// A registry reference to `value` in `lua`'s registry (kept for the state's lifetime).
fn registry_ref(lua: &Lua, value: impl mlua::IntoLua) -> mlua::Result<c_int> {
    // SAFETY: exec_raw pushes `value`; luaL_ref pops it into the registry and the reference
    // number is left as the one result.
    let r: i64 = unsafe {
        lua.exec_raw(value, |state| {
            let r = ffi::luaL_ref(state, ffi::LUA_REGISTRYINDEX);
            ffi::lua_pushinteger(state, r as ffi::lua_Integer);
        })
    }?;
    c_int::try_from(r).map_err(|_| mlua::Error::runtime("registry reference out of range"))
}

/// The running script's clock, read by the instruction hook.
#[derive(Default)]
struct RunClock {
    started: Cell<Option<std::time::Instant>>,
    next_handoff: Cell<std::time::Duration>,
}

impl RunClock {
    fn set(&self, started: Option<std::time::Instant>) {
        self.started.set(started);
        self.next_handoff.set(FIRST_HANDOFF);
    }
}

/// Scripts run on the runtime worker thread that received the command (no thread switch, and
/// the thread's engine keeps its compiled scripts). A script that runs long would hold up the
/// other connections queued on that worker, so past [`FIRST_HANDOFF`] the instruction hook
/// gives the worker's role to a fresh thread (tokio's `block_in_place` hand-off, waiting
/// [`HANDOFF_WAIT`] for the new thread to take it) and this thread finishes the script
/// outside the worker pool: other clients then get -BUSY past the threshold and SCRIPT KILL
/// is served. When the new thread did not take over in time, the worker stays here and a
/// later attempt repeats it; on a thread that already gave its role away this only waits.
fn hand_off_worker() {
    let on_workers = !super::debugger::in_forked_child()
        && tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if on_workers {
        crate::util::write_turn::block_in_place(|| std::thread::sleep(HANDOFF_WAIT));
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.loading.borrow_mut().take();
        // A full collection first, as Redis does since CVE-2024-46981: a script may have left
        // the collector mid-cycle (or stopped); closing then finalises from a settled heap.
        let _ = self.handles.lua.gc_collect();
        let (alloc, ud) = self.mlua_alloc;
        // SAFETY: exec_raw hands a valid thread of this state; lua_setallocf only swaps the
        // allocator. Both allocators serve blocks from the global allocator with the same
        // size and alignment ([`LUA_ALIGN`]), so mlua's frees blocks [`lua_alloc`] made and the reverse.
        let _ = unsafe {
            self.handles.lua.exec_raw::<()>((), |state| {
                ffi::lua_setallocf(state, alloc, ud as *mut c_void)
            })
        };
        // SAFETY: the handles are dropped exactly once, here. `lua`, the last field, is the
        // only owner of the state: dropping it closes the state.
        unsafe { ManuallyDrop::drop(&mut self.handles) };
    }
}

/// The hook every script runs under: every [`HOOK_EVERY`] instructions it gives up its
/// worker once the script runs long (see [`hand_off_worker`]), enforces FUNCTION LOAD's
/// timeout, and stops a script SCRIPT KILL asked to stop.
fn install_standard_hook(
    lua: &Lua,
    current: &Current,
    load_started: &Rc<Cell<Option<std::time::Instant>>>,
    run_started: &Rc<RunClock>,
) {
    let hook_current = current.clone();
    let hook_load_started = load_started.clone();
    let hook_run_started = run_started.clone();
    lua.set_hook(
        mlua::HookTriggers::new().every_nth_instruction(HOOK_EVERY),
        move |_, _| {
            // FUNCTION LOAD gives a library's code 500 ms to register its functions.
            if let Some(t) = hook_load_started.get() {
                if t.elapsed() > LOAD_TIMEOUT {
                    return Err(mlua::Error::external(CommandError(
                        "ERR FUNCTION LOAD timeout".into(),
                    )));
                }
            }
            let inv = hook_current.get();
            if inv.is_null() {
                return Ok(mlua::VmState::Continue);
            }
            if let Some(t) = hook_run_started.started.get() {
                let ran = t.elapsed();
                if ran >= hook_run_started.next_handoff.get() {
                    hook_run_started.next_handoff.set(ran * 4);
                    hand_off_worker();
                }
            }
            // SAFETY: non-null only while a script runs, pointing at its Invocation
            // (see Engine::run); the hook runs on this thread inside that call.
            let killed = unsafe { (*inv).killed() };
            #[cfg(fuzzing)]
            // SAFETY: as above.
            let killed = killed || over_fuzz_budget(unsafe { (*inv).started() });
            if killed {
                Err(mlua::Error::external(CommandError(
                    "ERR Script killed by user with SCRIPT KILL...".into(),
                )))
            } else {
                Ok(mlua::VmState::Continue)
            }
        },
    );
}

impl Engine {
    fn new(id: EngineId) -> Result<Engine, String> {
        // The state is mlua's own (so that closing it frees everything mlua allocated for
        // it; a state mlua adopts through `init_from_ptr` leaks that bookkeeping when it is
        // closed), with its allocator swapped for [`lua_alloc`] at once: mlua's aborts the
        // process when an allocation fails. Unsafe mode only because the sandbox, not mlua,
        // decides what scripts see; no C module loader is opened.
        // SAFETY: no library beyond base is opened here; see build() for the rest.
        let lua = unsafe { Lua::unsafe_new_with(StdLib::NONE, mlua::LuaOptions::new()) };
        // Boxed: the state keeps its address as the allocator's `ud`.
        let side = SideHeap::new().map(Box::new);
        let side_ud = side.as_deref().map_or(std::ptr::null_mut(), |h| {
            (h as *const SideHeap).cast_mut().cast::<c_void>()
        });
        let mut mlua_alloc: Option<(ffi::lua_Alloc, usize)> = None;
        // SAFETY: exec_raw hands a valid thread of this state; lua_getallocf reads and
        // lua_setallocf replaces the allocator (no block changes hands here).
        let swapped = unsafe {
            lua.exec_raw::<()>((), |state| {
                let mut ud: *mut c_void = std::ptr::null_mut();
                let previous = ffi::lua_getallocf(state, &mut ud);
                mlua_alloc = Some((previous, ud as usize));
                ffi::lua_setallocf(state, lua_alloc, side_ud);
            })
        };
        let Some(mlua_alloc) = mlua_alloc.filter(|_| swapped.is_ok()) else {
            return Err("ERR can't set up the Lua state: allocator".into());
        };
        let current: Current = Rc::new(Cell::new(std::ptr::null_mut()));
        let loading: Loading = Rc::new(RefCell::new(None));
        let load_started: Rc<Cell<Option<std::time::Instant>>> = Rc::new(Cell::new(None));
        let run_started = Rc::new(RunClock::default());
        let built = Self::build(&lua, &current, &loading, &load_started, &run_started);
        match built {
            Ok(b) => Ok(Engine {
                id,
                libs: b.libs,
                handles: ManuallyDrop::new(Handles {
                    functions: HashMap::new(),
                    result_slot: b.result_slot,
                    reply_keys: b.reply_keys,
                    hidden_globals: b.hidden_globals.clone(),
                    xpcall: b.xpcall,
                    handler: b.handler,
                    globals_metatable: b.globals_metatable,
                    library_api: b.library_api,
                    script_api: b.hidden_globals,
                    libraries: HashMap::new(),
                    gc_touched: b.gc_touched,
                    lua,
                }),
                current,
                loading,
                load_started,
                run_started,
                mlua_alloc,
                raw: b.raw,
                poisoned: false,
                _side: side,
            }),
            Err(e) => {
                let (alloc, ud) = mlua_alloc;
                // SAFETY: as in Engine::drop: mlua's allocator back, then the only handle
                // is dropped, which closes the state.
                let _ = unsafe {
                    lua.exec_raw::<()>((), |state| {
                        ffi::lua_setallocf(state, alloc, ud as *mut c_void)
                    })
                };
                drop(lua);
                Err(format!("ERR can't set up the Lua state: {e}"))
            }
        }
    }

    /// Libraries, the redis table, the hook and the sandbox.
    fn build(
        lua: &Lua,
        current: &Current,
        loading: &Loading,
        load_started: &Rc<Cell<Option<std::time::Instant>>>,
        run_started: &Rc<RunClock>,
    ) -> mlua::Result<Built> {
        lua.load_std_libs(StdLib::STRING | StdLib::TABLE | StdLib::MATH)?;
        let g = lua.globals();
        super::api::register(lua, &g, current)?;
        let libs = super::libs::register(lua, &g)?;
        install_standard_hook(lua, current, load_started, run_started);
        let xpcall: Function = g.raw_get("xpcall")?;
        let handler = error_handler(lua)?;
        g.raw_set("__redis__err__handler", handler.clone())?;
        let unwrap = lua.create_function(unwrap_error)?;
        let gc_touched = lua.create_table()?;
        let register = super::register::register_function(lua, loading.clone())?;
        let (globals_metatable, library_api, hidden_globals): (Table, Table, Table) = lua
            .load(include_str!("sandbox.lua"))
            .set_name("=podium_sandbox")
            .call((
                unwrap,
                REMOVED_GLOBALS.to_vec(),
                gc_touched.clone(),
                register,
            ))?;
        let result_slot = lua.create_table()?;
        let mut main_state: *mut ffi::lua_State = std::ptr::null_mut();
        // SAFETY: the closure only records the state exec_raw runs on (the main thread: no
        // coroutine is running while the engine is built).
        unsafe { lua.exec_raw::<()>((), |state| main_state = state) }?;
        let raw = RawRefs {
            state: main_state,
            globals: registry_ref(lua, &hidden_globals)?,
            handler: registry_ref(lua, &handler)?,
            result: registry_ref(lua, &result_slot)?,
            names: (
                registry_ref(lua, lua.create_string("KEYS")?)?,
                registry_ref(lua, lua.create_string("ARGV")?)?,
            ),
        };
        Ok(Built {
            reply_keys: super::convert::ReplyKeys::new(lua)?,
            result_slot,
            raw,
            libs,
            hidden_globals,
            xpcall,
            handler,
            globals_metatable,
            library_api,
            gc_touched,
        })
    }

    /// Run the next script under the Lua debugger's line hook (`on`), or back under the
    /// standard one. While debugging, SCRIPT KILL does not apply (as in Redis: the debugger's
    /// own timeout stops an endless loop).
    pub(super) fn debugging(&self, on: bool) {
        let lua = &self.handles.lua;
        if !on {
            install_standard_hook(lua, &self.current, &self.load_started, &self.run_started);
            return;
        }
        let current = self.current.clone();
        lua.set_hook(
            mlua::HookTriggers::new()
                .every_line()
                .every_nth_instruction(super::debugger::timeout_check_every()),
            move |lua, debug| {
                let inv = current.get();
                if inv.is_null() {
                    return Ok(mlua::VmState::Continue);
                }
                // SAFETY: as in the standard hook: the running script's Invocation, read
                // only here (no redis.call is running while a hook runs).
                let timeout_ms = unsafe {
                    (*inv)
                        .ctx
                        .srv
                        .config
                        .hot
                        .busy_reply_threshold
                        .load(std::sync::atomic::Ordering::Relaxed)
                };
                super::debugger::hook(lua, &debug, timeout_ms)?;
                Ok(mlua::VmState::Continue)
            },
        );
    }

    /// Compile `body` (its shebang line already blanked) as script `sha`, unless this state
    /// has it. The error is Redis's "Error compiling script" reply.
    pub(super) fn compile(&mut self, sha: &str, body: &[u8]) -> Result<c_int, Reply> {
        let name = <[u8; 40]>::try_from(sha.as_bytes()).ok();
        if let Some((_, reference)) = name.and_then(|n| self.handles.functions.get(&n)) {
            return Ok(*reference);
        }
        // Redis's Lua parses text only: a binary chunk fails in the lexer on its first byte
        // (ESC). A blank and an ESC, which is text, fails the same way.
        let source: &[u8] = if body.first() == Some(&27) {
            b" \x1b"
        } else {
            body
        };
        let f = self
            .handles
            .lua
            .load(source)
            .set_name("@user_script")
            .set_mode(mlua::ChunkMode::Text)
            .into_function()
            .map_err(|e| {
                Reply::Error(format!(
                    "ERR Error compiling script (new function): {}",
                    lua_message(&e)
                ))
            })?;
        let reference = registry_ref(&self.handles.lua, &f).map_err(|e| {
            Reply::Error(format!(
                "ERR Error compiling script (new function): {}",
                lua_message(&e)
            ))
        })?;
        // Every cached script is named by a SHA1's 40 hex digits; any other name (none reaches
        // here) is compiled again next time instead of cached.
        if let Some(n) = name {
            self.handles.functions.insert(n, (f, reference));
        }
        Ok(reference)
    }

    /// Run a FUNCTION library's code (`code`: after its shebang line) with the library API as
    /// its globals; the functions it registered, or Redis's error text.
    pub(super) fn load_library(
        &mut self,
        code: &[u8],
    ) -> Result<Vec<super::register::Registered>, String> {
        let source: &[u8] = if code.first() == Some(&27) {
            b" \x1b"
        } else {
            code
        };
        let f = self
            .handles
            .lua
            .load(source)
            .set_name("@user_function")
            .set_mode(mlua::ChunkMode::Text)
            .into_function()
            .map_err(|e| format!("ERR Error compiling function: {}", lua_message(&e)))?;
        let mt = &self.handles.globals_metatable;
        mt.raw_set("__index", self.handles.library_api.clone())
            .map_err(|e| format!("ERR {}", lua_message(&e)))?;
        *self.loading.borrow_mut() = Some(Vec::new());
        self.load_started.set(Some(std::time::Instant::now()));
        let result = self
            .handles
            .xpcall
            .call::<MultiValue>((f, self.handles.handler.clone()));
        self.load_started.set(None);
        let registered = self.loading.borrow_mut().take().unwrap_or_default();
        let restored = mt.raw_set("__index", self.handles.script_api.clone());
        if let Err(e) = restored {
            return Err(format!("ERR {}", lua_message(&e)));
        }
        let values =
            result.map_err(|e| format!("ERR Error registering functions: {}", lua_message(&e)))?;
        let mut it = values.into_iter();
        if !matches!(it.next(), Some(LuaValue::Boolean(true))) {
            let msg = match it.next() {
                Some(LuaValue::Table(t)) => t
                    .raw_get::<mlua::String>("err")
                    .map(|m| String::from_utf8_lossy(&m.as_bytes()).into_owned())
                    .unwrap_or_else(|_| "ERR execution failure".into()),
                Some(other) => self
                    .handles
                    .lua
                    .coerce_string(other)
                    .ok()
                    .flatten()
                    .map(|s| String::from_utf8_lossy(&s.as_bytes()).into_owned())
                    .unwrap_or_default(),
                None => String::new(),
            };
            return Err(format!("ERR Error registering functions: {msg}"));
        }
        Ok(registered)
    }

    /// The callback of function `name` of library `lib` (load id `load_id`, code `code`),
    /// loading the library into this state first if it has not seen this version of it.
    pub(super) fn library_function(
        &mut self,
        lib: &str,
        load_id: u64,
        code: &[u8],
        name: &str,
    ) -> Result<Function, String> {
        let fresh = self
            .handles
            .libraries
            .get(lib)
            .is_some_and(|(id, _)| *id == load_id);
        if !fresh {
            let registered = self.load_library(code)?;
            let callbacks = registered
                .into_iter()
                .map(|r| (r.name, r.callback))
                .collect();
            self.handles
                .libraries
                .insert(lib.to_string(), (load_id, callbacks));
        }
        self.handles
            .libraries
            .get(lib)
            .and_then(|(_, fns)| fns.get(name).cloned())
            .ok_or_else(|| "ERR Function not found".to_string())
    }

    /// Keep `registered` as library `lib`'s callbacks (load id `load_id`) in this state.
    pub(super) fn keep_library(
        &mut self,
        lib: &str,
        load_id: u64,
        registered: &[super::register::Registered],
    ) {
        let callbacks = registered
            .iter()
            .map(|r| (r.name.clone(), r.callback.clone()))
            .collect();
        self.handles
            .libraries
            .insert(lib.to_string(), (load_id, callbacks));
    }

    /// Run `callee` for `inv` (a FUNCTION's callback is called with the keys and arguments as
    /// its two parameters; an EVAL script finds them in `KEYS` and `ARGV`); its reply. `name`
    /// ends error texts (`script: <name>`).
    ///
    /// A panic inside (a fault in mlua or in Podium's libraries, never a script's doing) is
    /// caught here: the script gets an error, the run's bookkeeping is undone as after any
    /// run (the caller then ends the run, so no -BUSY is left behind), and the thread's state
    /// is replaced before its next script.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run(
        &mut self,
        inv: &mut Invocation<'_, '_, '_>,
        callee: Callee,
        name: &str,
        keys: &[bytes::Bytes],
        argv: &[bytes::Bytes],
        caller_resp3: bool,
        started: std::time::Instant,
    ) -> Reply {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Reply {
            let lua = &self.handles.lua;
            // SAFETY (for every dereference of `current`): the pointer is set to `inv` for the
            // duration of this call only and cleared before `inv`'s borrow ends; Lua is single
            // threaded, so redis.call and the hook only run inside the call below, on this
            // thread. The lifetimes are erased for storage, never extended.
            self.current
                .set((inv as *mut Invocation<'_, '_, '_>).cast());
            super::api::RUNNING.set((inv as *mut Invocation<'_, '_, '_>).cast());
            self.run_started.set(Some(started));
            #[cfg(fuzzing)]
            FUZZ_HOOK_CALLS_SEEN.with(|c| c.set(0));
            let result: mlua::Result<(bool, LuaValue)> = match &callee {
                // SAFETY: the reference is this engine's (see run_raw).
                Callee::Script(function) => unsafe {
                    run_raw(self.raw, &self.handles.result_slot, *function, keys, argv)
                },
                // SAFETY: `call_prepared` keeps to exec_raw's contract (see its comment).
                Callee::Function(f) => unsafe {
                    lua.exec_raw(
                        (&self.handles.hidden_globals, &self.handles.handler, f),
                        |state| call_prepared(state, keys, argv, None),
                    )
                },
            };
            self.run_started.set(None);
            self.current.set(std::ptr::null_mut());
            super::api::RUNNING.set(std::ptr::null_mut());
            self.libs.reset();
            // Nothing a script did to the collector outlives it (the sandbox's collectgarbage
            // notes a stop or a change of its parameters).
            if let Ok(true) = self.handles.gc_touched.raw_get::<bool>(1) {
                let _ = self.handles.gc_touched.raw_set(1, false);
                lua.gc_restart();
                lua.gc_inc(LUA_GC_PAUSE, LUA_GC_STEPMUL, 0);
            }
            // The reply built below says whether its error was already counted.
            crate::state::scripts::set_error_already_counted(false);
            let (ok, value) = match result {
                Ok(v) => v,
                Err(e) => {
                    return Reply::Error(format!("ERR Error running script {}", lua_message(&e)))
                }
            };
            if ok {
                return lua_to_reply(&self.handles.reply_keys, &value, inv.resp3, caller_resp3, 0);
            }
            error_reply(lua, name, &value)
        }));
        match outcome {
            Ok(reply) => reply,
            Err(_) => {
                self.run_started.set(None);
                self.current.set(std::ptr::null_mut());
                super::api::RUNNING.set(std::ptr::null_mut());
                self.poisoned = true;
                tracing::warn!("A script's run failed inside the Lua engine; the engine is reset");
                Reply::Error(format!(
                    "ERR Error running script (call to {name}): the script engine failed \
                     and was reset"
                ))
            }
        }
    }
}

/// What [`Engine::run`] calls: an EVAL script (its registry reference, from
/// [`Engine::compile`]) or a FUNCTION's callback.
pub(super) enum Callee {
    Script(c_int),
    Function(Function),
}

/// What [`run_c`] needs, handed to it as a light user data.
struct RawRun<'a> {
    refs: RawRefs,
    function: c_int,
    keys: &'a [bytes::Bytes],
    argv: &'a [bytes::Bytes],
}

/// Run EVAL script `function` (a registry reference) on the engine's state through
/// `lua_cpcall`, leaving its two results in `result_slot`; read them back as mlua values.
///
/// # Safety
/// `refs` and `function` belong to the engine whose `result_slot` is given, and no other call
/// into that state is in progress on this thread (the engine runs one script at a time).
unsafe fn run_raw(
    refs: RawRefs,
    result_slot: &Table,
    function: c_int,
    keys: &[bytes::Bytes],
    argv: &[bytes::Bytes],
) -> mlua::Result<(bool, LuaValue)> {
    let params = RawRun {
        refs,
        function,
        keys,
        argv,
    };
    let state = refs.state;
    // SAFETY: lua_cpcall runs run_c in protected mode with `params` (alive for the call) as
    // its only argument; on success it leaves the stack as it was, on failure the error
    // value on top, which is popped here.
    let status = unsafe {
        let top = ffi::lua_gettop(state);
        let status = ffi::lua_cpcall(state, run_c, &params as *const RawRun as *mut c_void);
        if status != 0 {
            let mut len = 0usize;
            let p = ffi::lua_tolstring(state, -1, &mut len);
            let text = if p.is_null() {
                "error running the script".to_string()
            } else {
                String::from_utf8_lossy(std::slice::from_raw_parts(p.cast::<u8>(), len))
                    .into_owned()
            };
            ffi::lua_settop(state, top);
            Err(text)
        } else {
            Ok(())
        }
    };
    if let Err(text) = status {
        return Err(mlua::Error::RuntimeError(text));
    }
    Ok((result_slot.raw_get(1)?, result_slot.raw_get(2)?))
}

/// The C function `run_raw` calls: push the script's globals, the error handler and the
/// function from the registry, make the call ([`call_prepared`]), and store its two results
/// in the result slot.
///
/// # Safety
/// Called by `lua_cpcall` with a `RawRun` as its light user data.
unsafe extern "C-unwind" fn run_c(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: the user data is the RawRun run_raw passed, alive for this call; the pushes
    // below are on a fresh C frame with room made first; any Lua error unwinds (longjmp) to
    // lua_cpcall across frames that own nothing needing a destructor.
    unsafe {
        let params = &*(ffi::lua_touserdata(state, 1) as *const RawRun);
        ffi::lua_settop(state, 0);
        ffi::luaL_checkstack(state, 8, c"script call".as_ptr());
        ffi::lua_rawgeti_(state, ffi::LUA_REGISTRYINDEX, params.refs.globals);
        ffi::lua_rawgeti_(state, ffi::LUA_REGISTRYINDEX, params.refs.handler);
        ffi::lua_rawgeti_(state, ffi::LUA_REGISTRYINDEX, params.function);
        call_prepared(state, params.keys, params.argv, Some(params.refs.names));
        // Stack: ok (1), value (2).
        ffi::lua_rawgeti_(state, ffi::LUA_REGISTRYINDEX, params.refs.result);
        ffi::lua_pushvalue(state, 1);
        ffi::lua_rawseti_(state, 3, 1);
        ffi::lua_pushvalue(state, 2);
        ffi::lua_rawseti_(state, 3, 2);
        0
    }
}

/// The reply for a script that failed with `value` (the error handler's table, or a memory
/// error's text, which Lua raises without calling the handler).
fn error_reply(lua: &Lua, sha: &str, value: &LuaValue) -> Reply {
    match value {
        LuaValue::Table(t) => {
            crate::state::scripts::set_error_already_counted(
                t.raw_get::<bool>(crate::state::scripts::ERROR_COUNTED_FIELD)
                    .unwrap_or(false),
            );
            let msg: Option<mlua::String> = t.raw_get("err").ok();
            let msg = msg
                .map(|m| String::from_utf8_lossy(&m.as_bytes()).into_owned())
                .unwrap_or_else(|| "ERR execution failure".into());
            let source: Option<String> = t.raw_get("source").ok();
            let line: Option<i64> = t.raw_get("line").ok();
            match (source, line) {
                (Some(s), Some(l)) => Reply::Error(format!("{msg} script: {sha}, on {s}:{l}.")),
                _ => Reply::Error(msg),
            }
        }
        other => {
            let text = lua
                .coerce_string(other.clone())
                .ok()
                .flatten()
                .map(|s| String::from_utf8_lossy(&s.as_bytes()).into_owned())
                .unwrap_or_else(|| format!("{other:?}"));
            Reply::Error(format!("ERR {text} script: {sha}"))
        }
    }
}

/// One script call, inside the single protected call `Engine::run` makes: the stack holds the
/// real globals (1), the error handler (2) and the compiled function (3). Builds the KEYS and
/// ARGV arrays, runs the function under the handler (an EVAL script finds the arrays as the
/// globals `KEYS` and `ARGV`, removed again afterwards; a FUNCTION's callback gets them as its
/// two parameters), and leaves exactly two values: whether it succeeded, and its first result
/// or the handler's error value. `script_names`: for an EVAL script, the registry references
/// of the strings "KEYS" and "ARGV"; None for a FUNCTION's callback.
///
/// Written against the Lua API directly because this is every call's fixed cost: through
/// mlua each table, string and assignment would be a protected call of its own (two C
/// closures allocated each time on Lua 5.1), which made up most of a short script's time.
///
/// # Safety
/// `state` is the engine's state inside mlua's protected call (exec_raw). Lua may raise an
/// error (out of memory) out of any call here, unwinding to that protected call: nothing in
/// this function owns anything that needs dropping.
unsafe fn call_prepared(
    state: *mut ffi::lua_State,
    keys: &[bytes::Bytes],
    argv: &[bytes::Bytes],
    script_names: Option<(c_int, c_int)>,
) {
    use std::ffi::c_int;
    const GLOBALS: c_int = 1;
    const HANDLER: c_int = 2;
    const FUNCTION: c_int = 3;
    const KEYS: c_int = 4;
    const ARGV: c_int = 5;
    // SAFETY: see the function's contract; every index used below is on the stack (the
    // three arguments, then what this function pushes, after checkstack made room).
    unsafe {
        ffi::luaL_checkstack(state, 8, c"script call".as_ptr());
        for items in [keys, argv] {
            ffi::lua_createtable(state, items.len().min(i32::MAX as usize) as c_int, 0);
            for (i, v) in items.iter().enumerate() {
                ffi::lua_pushlstring(state, v.as_ptr().cast(), v.len());
                ffi::lua_rawseti(state, -2, (i + 1) as ffi::lua_Integer);
            }
        }
        let status = match script_names {
            None => {
                ffi::lua_pushvalue(state, FUNCTION);
                ffi::lua_pushvalue(state, KEYS);
                ffi::lua_pushvalue(state, ARGV);
                ffi::lua_pcall(state, 2, 1, HANDLER)
            }
            Some((keys_name, argv_name)) => {
                ffi::lua_rawgeti_(state, ffi::LUA_REGISTRYINDEX, keys_name);
                ffi::lua_pushvalue(state, KEYS);
                ffi::lua_rawset(state, GLOBALS);
                ffi::lua_rawgeti_(state, ffi::LUA_REGISTRYINDEX, argv_name);
                ffi::lua_pushvalue(state, ARGV);
                ffi::lua_rawset(state, GLOBALS);
                ffi::lua_pushvalue(state, FUNCTION);
                let status = ffi::lua_pcall(state, 0, 1, HANDLER);
                // KEYS and ARGV belong to this call only.
                ffi::lua_rawgeti_(state, ffi::LUA_REGISTRYINDEX, keys_name);
                ffi::lua_pushnil(state);
                ffi::lua_rawset(state, GLOBALS);
                ffi::lua_rawgeti_(state, ffi::LUA_REGISTRYINDEX, argv_name);
                ffi::lua_pushnil(state);
                ffi::lua_rawset(state, GLOBALS);
                status
            }
        };
        // Stack: the five slots above, then the result (6). Leave (ok, result).
        ffi::lua_pushboolean(state, c_int::from(status == 0));
        ffi::lua_replace(state, 1);
        ffi::lua_replace(state, 2);
        ffi::lua_settop(state, 2);
    }
}

/// An error value as Lua code catching it sees it: a failed command's error as `{err=...}`
/// (`as_table`, an xpcall handler) or as its text (pcall); another host error as its text;
/// anything else unchanged.
fn unwrap_error(lua: &Lua, (v, as_table): (LuaValue, bool)) -> mlua::Result<LuaValue> {
    match &v {
        LuaValue::Error(e) => match command_error(e) {
            Some(msg) if as_table => {
                let t = lua.create_table()?;
                t.raw_set("err", msg)?;
                t.raw_set(crate::state::scripts::ERROR_COUNTED_FIELD, true)?;
                Ok(LuaValue::Table(t))
            }
            Some(msg) => Ok(LuaValue::String(lua.create_string(msg)?)),
            None => Ok(LuaValue::String(lua.create_string(lua_message(e))?)),
        },
        // Redis's pcall gives the text of an {err=...} table raised by Lua code too.
        LuaValue::Table(t) if !as_table => match t.raw_get::<LuaValue>("err")? {
            LuaValue::String(s) => Ok(LuaValue::String(s)),
            _ => Ok(v),
        },
        _ => Ok(v),
    }
}

/// The xpcall handler (Redis's `__redis__err__handler`): a plain error becomes `{err='ERR
/// <message>'}`, and the position in the user's script where it happened is added as
/// `source` and `line`.
fn error_handler(lua: &Lua) -> mlua::Result<Function> {
    lua.create_function(|lua, err: LuaValue| {
        let t = match err {
            LuaValue::Table(t) => t,
            other => {
                if let LuaValue::Error(e) = &other {
                    if let Some(msg) = command_error(e) {
                        let t = lua.create_table()?;
                        t.raw_set("err", msg)?;
                        t.raw_set(crate::state::scripts::ERROR_COUNTED_FIELD, true)?;
                        return with_position(lua, t);
                    }
                }
                let text = match &other {
                    // A library function written in Rust failed: Lua's luaL_error would have
                    // put the calling line of the script first.
                    LuaValue::Error(e) if matches!(**e, mlua::Error::CallbackError { .. }) => {
                        match script_position(lua) {
                            Some((source, line)) => format!(
                                "{}:{line}: {}",
                                source.trim_start_matches('@'),
                                lua_message(e)
                            ),
                            None => lua_message(e),
                        }
                    }
                    LuaValue::Error(e) => lua_message(e),
                    v => lua
                        .coerce_string(v.clone())?
                        .map(|s| String::from_utf8_lossy(&s.as_bytes()).into_owned())
                        .unwrap_or_else(|| format!("{v:?}")),
                };
                let t = lua.create_table()?;
                t.raw_set("err", format!("ERR {text}"))?;
                t
            }
        };
        with_position(lua, t)
    })
}

/// The innermost frame of the user's script: its source name and current line.
fn script_position(lua: &Lua) -> Option<(String, i64)> {
    for level in 0..200 {
        let frame = lua.inspect_stack(level)?;
        let source = frame.source().source;
        if let Some(src @ ("@user_script" | "@user_function")) = source.as_deref() {
            return Some((src.to_string(), frame.curr_line() as i64));
        }
    }
    None
}

/// Add where in the user's script the error happened (its innermost frame) to `t`.
fn with_position(lua: &Lua, t: Table) -> mlua::Result<Table> {
    for level in 0..200 {
        let Some(frame) = lua.inspect_stack(level) else {
            break;
        };
        let source = frame.source().source;
        if let Some(src @ ("@user_script" | "@user_function")) = source.as_deref() {
            t.raw_set("source", src)?;
            t.raw_set("line", frame.curr_line())?;
            break;
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allocator_fails_softly() {
        // SAFETY: the calls follow Lua's allocator contract: a fresh block, a grow, a failed
        // huge grow (the old block stays valid), and frees of what was returned.
        unsafe {
            assert!(lua_alloc(std::ptr::null_mut(), std::ptr::null_mut(), 0, 1 << 48).is_null());
            assert!(lua_alloc(std::ptr::null_mut(), std::ptr::null_mut(), 0, usize::MAX).is_null());
            let p = lua_alloc(std::ptr::null_mut(), std::ptr::null_mut(), 0, 64);
            assert!(!p.is_null());
            std::ptr::write_bytes(p as *mut u8, 7, 64);
            let q = lua_alloc(std::ptr::null_mut(), p, 64, 128);
            assert!(!q.is_null());
            assert_eq!(*(q as *const u8).add(63), 7);
            assert!(lua_alloc(std::ptr::null_mut(), q, 128, 1 << 48).is_null());
            assert_eq!(
                *(q as *const u8).add(63),
                7,
                "a failed grow keeps the block"
            );
            assert!(lua_alloc(std::ptr::null_mut(), q, 128, 0).is_null());
        }
    }
}
