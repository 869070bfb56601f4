//! Everything unsafe: the interposed libc entry points, the real functions behind them
//! (`dlsym(RTLD_NEXT)`), raw system calls for the library's own I/O, the per-thread buffers
//! and the process-wide state. Every unsafe block says why it is sound.
//!
//! Rules this module keeps, so that a traced program behaves as it would untraced:
//! - `errno` is saved right after the real call and restored before returning;
//! - no locks and no allocation on any interposed path: records go to a fixed pool of
//!   per-thread buffers claimed with atomics; a buffer is written with one `write(2)`, so
//!   records of different threads never interleave inside a record;
//! - the library's own I/O uses raw `syscall(2)`s, never the symbols it interposes, so it can
//!   never log itself;
//! - `read`/`write`/`close` on descriptors that are not known sockets cost one relaxed load of
//!   the descriptor table (and an `fstat` for descriptors at or above 65536).

use core::cell::{Cell, UnsafeCell};
use core::ffi::{CStr, c_char, c_int, c_uint, c_void};
use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering::*,
};

use libc::{iovec, mmsghdr, msghdr, off_t, pid_t, size_t, sockaddr, socklen_t, ssize_t};

use crate::fdtab;
use crate::hash::Fnv;
use crate::wire::{self, Ep, MAX_RECORD, Rec, code, origin};

// ---------------------------------------------------------------------------------------------
// The real functions.

macro_rules! functions {
    ($($name:ident = $sym:literal,)*) => {
        #[derive(Clone, Copy)]
        #[repr(usize)]
        enum F { $($name,)* }
        const NAMES: &[&CStr] = &[$($sym,)*];
        const ALL: &[F] = &[$(F::$name,)*];
    };
}

functions! {
    Socket = c"socket", Socketpair = c"socketpair", Connect = c"connect", Accept = c"accept",
    Accept4 = c"accept4", Bind = c"bind", Listen = c"listen", Close = c"close",
    Shutdown = c"shutdown", CloseRange = c"close_range", Closefrom = c"closefrom",
    Send = c"send", Sendto = c"sendto", Sendmsg = c"sendmsg", Sendmmsg = c"sendmmsg",
    Write = c"write", Writev = c"writev", Sendfile = c"sendfile", Sendfile64 = c"sendfile64",
    Recv = c"recv", Recvfrom = c"recvfrom", Recvmsg = c"recvmsg", Recvmmsg = c"recvmmsg",
    Read = c"read", Readv = c"readv", ReadChk = c"__read_chk", RecvChk = c"__recv_chk",
    RecvfromChk = c"__recvfrom_chk", Dup = c"dup", Dup2 = c"dup2", Dup3 = c"dup3",
    Fcntl = c"fcntl", Fcntl64 = c"fcntl64", Fork = c"fork", Execve = c"execve",
    Execv = c"execv", Execvp = c"execvp", Execvpe = c"execvpe", Execveat = c"execveat",
    Fexecve = c"fexecve", Exit = c"_exit", ExitUpper = c"_Exit", Open = c"open",
    Open64 = c"open64", Openat = c"openat", Openat64 = c"openat64", Pipe = c"pipe",
    Pipe2 = c"pipe2",
}

/// Resolved addresses: 0 not resolved yet, [`MISSING`] when libc has no such function.
static REAL: [AtomicUsize; NAMES.len()] = [const { AtomicUsize::new(0) }; NAMES.len()];
const MISSING: usize = usize::MAX;

#[cold]
fn resolve(f: F) -> usize {
    let Some(name) = NAMES.get(f as usize) else {
        return 0;
    };
    // SAFETY: `name` is a NUL-terminated static string; dlsym(RTLD_NEXT) from a loaded shared
    // object is always allowed (it may allocate, which happens once per name, at start-up).
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    if let Some(slot) = REAL.get(f as usize) {
        slot.store(if p == 0 { MISSING } else { p }, Relaxed);
    }
    p
}

#[inline(always)]
fn real_addr(f: F) -> usize {
    match REAL.get(f as usize).map(|s| s.load(Relaxed)) {
        Some(MISSING) => 0,
        Some(p) if p != 0 => p,
        _ => resolve(f),
    }
}

/// The real function for `$f`, typed as its C prototype; `None` when libc lacks it.
macro_rules! real {
    ($f:ident : $ty:ty) => {{
        let p = real_addr(F::$f);
        if p == 0 {
            None
        } else {
            // SAFETY: `p` is the non-null address dlsym(RTLD_NEXT) returned for the libc
            // function named after `$f` in NAMES, and `$ty` is that function's C prototype.
            Some(unsafe { core::mem::transmute::<usize, $ty>(p) })
        }
    }};
}

type FdFn = unsafe extern "C" fn(c_int) -> c_int;
type ReadFn = unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t;
type WriteFn = unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t;
type IovFn = unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t;
type SendFn = unsafe extern "C" fn(c_int, *const c_void, size_t, c_int) -> ssize_t;
type RecvFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int) -> ssize_t;
type SendtoFn = unsafe extern "C" fn(
    c_int,
    *const c_void,
    size_t,
    c_int,
    *const sockaddr,
    socklen_t,
) -> ssize_t;
type RecvfromFn = unsafe extern "C" fn(
    c_int,
    *mut c_void,
    size_t,
    c_int,
    *mut sockaddr,
    *mut socklen_t,
) -> ssize_t;
type SendmsgFn = unsafe extern "C" fn(c_int, *const msghdr, c_int) -> ssize_t;
type RecvmsgFn = unsafe extern "C" fn(c_int, *mut msghdr, c_int) -> ssize_t;
type SendmmsgFn = unsafe extern "C" fn(c_int, *mut mmsghdr, c_uint, c_int) -> c_int;
type RecvmmsgFn =
    unsafe extern "C" fn(c_int, *mut mmsghdr, c_uint, c_int, *mut libc::timespec) -> c_int;
type AddrFn = unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int;
type AcceptFn = unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
type Accept4Fn = unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int;
type Fd2Fn = unsafe extern "C" fn(c_int, c_int) -> c_int;
type Fd3Fn = unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
type FcntlFn = unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
type SendfileFn = unsafe extern "C" fn(c_int, c_int, *mut off_t, size_t) -> ssize_t;
type ExecveFn =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
type ExecvFn = unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;
type ExecveatFn = unsafe extern "C" fn(
    c_int,
    *const c_char,
    *const *const c_char,
    *const *const c_char,
    c_int,
) -> c_int;
type FexecveFn = unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
type ExitFn = unsafe extern "C" fn(c_int) -> !;
type OpenFn = unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int;
type OpenatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int;

// ---------------------------------------------------------------------------------------------
// Small safe wrappers.

fn errno() -> c_int {
    // SAFETY: __errno_location returns this thread's errno, valid for the thread's life.
    unsafe { *libc::__errno_location() }
}

fn set_errno(e: c_int) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = e }
}

/// For an entry point libc lacks: fail as the kernel would for an unknown call.
fn missing() -> c_int {
    set_errno(libc::ENOSYS);
    -1
}

fn clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(id, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

#[inline]
fn now() -> u64 {
    clock(libc::CLOCK_REALTIME)
}

fn sys_gettid() -> u32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

fn sys_write(fd: c_int, b: &[u8]) -> isize {
    // SAFETY: `b` is valid for `b.len()` bytes.
    unsafe { libc::syscall(libc::SYS_write, fd, b.as_ptr(), b.len()) as isize }
}

fn sys_read(fd: c_int, b: &mut [u8]) -> isize {
    // SAFETY: `b` is valid for writes of `b.len()` bytes.
    unsafe { libc::syscall(libc::SYS_read, fd, b.as_mut_ptr(), b.len()) as isize }
}

/// `path` must end with a NUL byte.
fn sys_open(path: &[u8], flags: c_int, mode: c_uint) -> c_int {
    if path.last() != Some(&0) {
        return -1;
    }
    // SAFETY: `path` is a NUL-terminated string.
    unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path.as_ptr(), flags, mode) as c_int }
}

fn sys_close(fd: c_int) {
    // SAFETY: closing a descriptor this library owns.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

fn sys_fstat(fd: c_int) -> Option<libc::stat> {
    // SAFETY: a zeroed `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: `st` is a valid out-pointer.
    let r = unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) };
    (r == 0).then_some(st)
}

fn sys_fcntl(fd: c_int, cmd: c_int, arg: c_int) -> c_int {
    // SAFETY: F_DUPFD_CLOEXEC with an integer argument touches no memory.
    unsafe { libc::syscall(libc::SYS_fcntl, fd, cmd, arg) as c_int }
}

fn is_socket_fd(fd: c_int) -> bool {
    let e = errno();
    let r = sys_fstat(fd).is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFSOCK);
    set_errno(e);
    r
}

fn getsockopt_int(fd: c_int, opt: c_int) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut len = core::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: `v` and `len` are valid out-pointers of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&mut v as *mut c_int).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(v)
}

/// The descriptor-table entry of a socket, learnt with `getsockopt` when not known yet;
/// 0 when `fd` is not a socket.
fn kind_of(fd: c_int) -> u8 {
    let e = fdtab::get(fd);
    if e != 0 {
        return e;
    }
    let (Some(ty), Some(dom)) = (
        getsockopt_int(fd, libc::SO_TYPE),
        getsockopt_int(fd, libc::SO_DOMAIN),
    ) else {
        return 0;
    };
    let e = fdtab::entry(dom, ty);
    fdtab::set(fd, e);
    e
}

type NameFn = unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;

fn name_of(fd: c_int, f: NameFn) -> Ep {
    // SAFETY: a zeroed sockaddr_storage is valid.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let mut len = core::mem::size_of::<libc::sockaddr_storage>() as socklen_t;
    // SAFETY: `ss` and `len` are valid out-pointers; `len` holds the size of `ss`.
    let r = unsafe {
        f(
            fd,
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Ep::NONE;
    }
    Ep::from_sockaddr(storage_bytes(&ss, len as usize))
}

fn storage_bytes(ss: &libc::sockaddr_storage, len: usize) -> &[u8] {
    let n = len.min(core::mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: `ss` is a plain C struct of at least `n` initialized bytes.
    unsafe { core::slice::from_raw_parts((ss as *const libc::sockaddr_storage).cast::<u8>(), n) }
}

fn sockname(fd: c_int) -> Ep {
    name_of(fd, libc::getsockname)
}

fn peername(fd: c_int) -> Ep {
    name_of(fd, libc::getpeername)
}

fn peer_pid(fd: c_int) -> Option<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = core::mem::size_of::<libc::ucred>() as socklen_t;
    // SAFETY: `cred` and `len` are valid out-pointers of the size given.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0 && cred.pid > 0).then_some(cred.pid as u32)
}

/// An endpoint from a caller's `sockaddr` argument (`None` when it is NULL).
///
/// # Safety
/// `addr` must be NULL or valid for `len` bytes (the call it was passed to succeeded or the
/// kernel read it).
unsafe fn arg_ep(addr: *const sockaddr, len: socklen_t) -> Option<Ep> {
    if addr.is_null() {
        return None;
    }
    let n = (len as usize).min(core::mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: the caller guarantees `addr` is valid for `len` >= `n` bytes.
    let b = unsafe { core::slice::from_raw_parts(addr.cast::<u8>(), n) };
    Some(Ep::from_sockaddr(b))
}

/// FNV-1a of `n` bytes at `buf`.
///
/// # Safety
/// `buf` must be valid for reads of `n` bytes.
unsafe fn hash_buf(buf: *const c_void, n: usize) -> u64 {
    let mut h = Fnv::new();
    if !buf.is_null() && n > 0 {
        // SAFETY: the caller guarantees `buf` is valid for `n` bytes.
        h.update(unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), n) });
    }
    h.finish()
}

/// FNV-1a of the first `n` bytes across `cnt` iovecs.
///
/// # Safety
/// `iov` must be NULL or valid for `cnt` iovecs whose first `n` bytes in total are readable
/// (the kernel just moved them).
unsafe fn hash_iov(iov: *const iovec, cnt: usize, n: usize) -> u64 {
    let mut h = Fnv::new();
    if iov.is_null() {
        return h.finish();
    }
    let mut left = n;
    for i in 0..cnt {
        if left == 0 {
            break;
        }
        // SAFETY: `i < cnt`, and the caller guarantees `cnt` valid iovecs.
        let v = unsafe { &*iov.add(i) };
        let take = v.iov_len.min(left);
        if take > 0 && !v.iov_base.is_null() {
            // SAFETY: the kernel moved these `take` bytes of this iovec.
            h.update(unsafe { core::slice::from_raw_parts(v.iov_base.cast::<u8>(), take) });
        }
        left -= take;
    }
    h.finish()
}

// ---------------------------------------------------------------------------------------------
// Process-wide state.

static ENABLED: AtomicBool = AtomicBool::new(false);
/// Set once the end-of-log record is written: later records are dropped.
static CLOSED: AtomicBool = AtomicBool::new(false);
static LOG_FD: AtomicI32 = AtomicI32::new(-1);
static LOG_DEV: AtomicU64 = AtomicU64::new(0);
static LOG_INO: AtomicU64 = AtomicU64::new(0);
static REOPENING: AtomicBool = AtomicBool::new(false);
static KEY: AtomicU32 = AtomicU32::new(u32::MAX);
static ARGV: AtomicPtr<*const c_char> = AtomicPtr::new(core::ptr::null_mut());
static ARGC: AtomicI32 = AtomicI32::new(0);

#[inline(always)]
fn on() -> bool {
    ENABLED.load(Relaxed)
}

/// What the log's header and name are made of. Written only while the process has one
/// thread (the constructor, a fork child), read by any thread afterwards.
struct Conf {
    dir: [u8; 4096],
    dir_len: usize,
    host: [u8; 65],
    host_len: usize,
    exe: [u8; 4096],
    exe_len: usize,
    argv: [u8; 8192],
    argv_len: usize,
    name: [u8; 256],
    name_len: usize,
    /// `dir/name` and a NUL.
    path: [u8; 4096 + 256 + 2],
    header: [u8; 65 + 4096 + 8192 + 256 + 64],
    header_len: usize,
    pid: u32,
    ppid: u32,
    start_ticks: u64,
}

struct Shared<T>(UnsafeCell<T>);
// SAFETY: see `Conf`: mutation happens only while the process is single-threaded.
unsafe impl<T> Sync for Shared<T> {}

static CONF: Shared<Conf> = Shared(UnsafeCell::new(Conf {
    dir: [0; 4096],
    dir_len: 0,
    host: [0; 65],
    host_len: 0,
    exe: [0; 4096],
    exe_len: 0,
    argv: [0; 8192],
    argv_len: 0,
    name: [0; 256],
    name_len: 0,
    path: [0; 4096 + 256 + 2],
    header: [0; 65 + 4096 + 8192 + 256 + 64],
    header_len: 0,
    pid: 0,
    ppid: 0,
    start_ticks: 0,
}));

fn conf() -> &'static Conf {
    // SAFETY: shared reads; `Conf` is only mutated while single-threaded (see `conf_mut`).
    unsafe { &*CONF.0.get() }
}

/// # Safety
/// Only while the process has a single thread (the constructor, a fork child's handler), and
/// no reference from `conf` is alive.
#[allow(clippy::mut_from_ref)]
unsafe fn conf_mut() -> &'static mut Conf {
    // SAFETY: the caller guarantees exclusivity.
    unsafe { &mut *CONF.0.get() }
}

// ---------------------------------------------------------------------------------------------
// Per-thread buffers, in the spill file.

/// Buffers in the pool: threads beyond this many write each record with its own `write`.
const SLOTS: usize = 1024;
/// Bytes per buffer (about 580 plain records).
const BUF: usize = 16 * 1024;
/// A buffer is written out when its oldest record is this old (checked at each record).
const FLUSH_AGE_NS: u64 = 100_000_000;
/// The spill file's header: its magic, then zeros up to the first slot.
const SPILL_HEAD: usize = 64;
/// A slot in the spill file: the committed length (u32), four reserved bytes, the buffer.
const SLOT_BYTES: usize = 8 + BUF;
/// The spill file's size: sparse, so only the pages of buffers in use take space.
const SPILL_BYTES: usize = SPILL_HEAD + SLOTS * SLOT_BYTES;

const FREE: u32 = 0;
const IDLE: u32 = 1;
const BUSY: u32 = 2;
const DEAD: u32 = 3;

/// One thread's buffer. `state` guards the cells and the slot's bytes in the spill mapping:
/// whoever moves it from IDLE (or FREE) to BUSY has them to itself until it stores another
/// state.
struct Slot {
    state: AtomicU32,
    first: UnsafeCell<u64>,
}

// SAFETY: the cells are only touched by the thread that holds the slot BUSY.
unsafe impl Sync for Slot {}

static POOL: [Slot; SLOTS] = [const {
    Slot {
        state: AtomicU32::new(FREE),
        first: UnsafeCell::new(0),
    }
}; SLOTS];

/// The address of this image's spill mapping (`MAP_SHARED` over `<log>.spill`), 0 when there
/// is none. The buffers live there, not in the process's own memory, so that what a process
/// buffered outlives it: a reader finds the records a killed process had not yet written to
/// its log in the spill file, each slot's committed bytes (`causeway_capture::spill`).
static SPILL: AtomicUsize = AtomicUsize::new(0);

const NO_SLOT: u32 = u32::MAX;
const POOL_FULL: u32 = u32::MAX - 1;

thread_local! {
    static MY_SLOT: Cell<u32> = const { Cell::new(NO_SLOT) };
    static MY_TID: Cell<u32> = const { Cell::new(0) };
}

fn tid() -> u32 {
    MY_TID
        .try_with(|c| {
            let t = c.get();
            if t != 0 {
                return t;
            }
            let t = sys_gettid();
            c.set(t);
            t
        })
        .unwrap_or_else(|_| sys_gettid())
}

/// Slot `i`'s committed length and buffer in the spill mapping.
///
/// # Safety
/// The caller holds slot `i` BUSY (or the process is single-threaded), so that no other
/// reference to its buffer is alive.
#[allow(clippy::mut_from_ref)]
unsafe fn slot_mem(i: usize) -> Option<(&'static AtomicU32, &'static mut [u8; BUF])> {
    let base = SPILL.load(Acquire);
    if base == 0 || i >= SLOTS {
        return None;
    }
    let at = base + SPILL_HEAD + i * SLOT_BYTES;
    // SAFETY: the mapping is SPILL_BYTES long, page-aligned, and stays mapped while SPILL is
    // non-zero (only a fork child, single-threaded, replaces it); `at` is 4-aligned (64 +
    // a multiple of 8) and `at + 8 + BUF` is within the mapping. The caller holds the slot.
    unsafe {
        Some((
            &*(at as *const AtomicU32),
            &mut *((at + 8) as *mut [u8; BUF]),
        ))
    }
}

/// Slot `i`'s committed length alone (any thread may read it).
fn slot_committed(i: usize) -> Option<&'static AtomicU32> {
    let base = SPILL.load(Acquire);
    if base == 0 || i >= SLOTS {
        return None;
    }
    // SAFETY: as in `slot_mem`: the address is 4-aligned and inside the mapping, and the
    // length is only ever accessed atomically.
    Some(unsafe { &*((base + SPILL_HEAD + i * SLOT_BYTES) as *const AtomicU32) })
}

/// Writes out slot `i`'s committed records and empties it.
///
/// # Safety
/// As for `slot_mem`.
unsafe fn flush_slot(i: usize) {
    // SAFETY: as the caller guarantees.
    if let Some((len, data)) = unsafe { slot_mem(i) } {
        let n = (len.load(Relaxed) as usize).min(BUF);
        write_log(data.get(..n).unwrap_or(&[]));
        len.store(0, Release);
    }
}

/// This thread's buffer, claimed on first use.
fn my_slot() -> Option<usize> {
    if SPILL.load(Relaxed) == 0 {
        return None;
    }
    let cur = MY_SLOT.try_with(Cell::get).unwrap_or(POOL_FULL);
    if cur == POOL_FULL {
        return None;
    }
    if (cur as usize) < SLOTS {
        return Some(cur as usize);
    }
    let start = (tid() as usize).wrapping_mul(7) % SLOTS;
    for k in 0..SLOTS {
        let i = (start + k) % SLOTS;
        let s = &POOL[i];
        if s.state
            .compare_exchange(FREE, BUSY, Acquire, Relaxed)
            .is_ok()
        {
            // A slot left by an exited thread was written out then; one a fork child took
            // over was emptied by its new spill file. Whatever is committed is ours now.
            s.state.store(IDLE, Release);
            let _ = MY_SLOT.try_with(|c| c.set(i as u32));
            let key = KEY.load(Relaxed);
            // Keys below 32 live in the thread descriptor: setting one never allocates.
            if key < 32 {
                // SAFETY: `key` came from pthread_key_create; the value is an integer tag.
                unsafe { libc::pthread_setspecific(key, (i + 1) as *const c_void) };
            }
            return Some(i);
        }
    }
    let _ = MY_SLOT.try_with(|c| c.set(POOL_FULL));
    None
}

/// Appends a record to this thread's buffer, or writes it at once when the buffer is not
/// available (no spill file, pool full, a signal handler interrupted this thread's own
/// append, the process is exiting). A record counts once its bytes are in the buffer and the
/// committed length covers them (a release store after the bytes): a process killed while
/// encoding leaves the record out of the spill, never half of it in.
fn emit(rec: &Rec) {
    emit_and_flush(rec, false);
}

/// [`emit`], then (if `flush`) the buffer written out with the record.
fn emit_and_flush(rec: &Rec, flush: bool) {
    if !on() || CLOSED.load(Relaxed) {
        return;
    }
    if let Some(i) = my_slot() {
        let s = &POOL[i];
        if s.state
            .compare_exchange(IDLE, BUSY, Acquire, Relaxed)
            .is_ok()
        {
            // SAFETY: holding the slot BUSY gives this thread the cells and the buffer.
            let first = unsafe { &mut *s.first.get() };
            // SAFETY: as above.
            if let Some((committed, data)) = unsafe { slot_mem(i) } {
                let mut len = (committed.load(Relaxed) as usize).min(BUF);
                if len > BUF - MAX_RECORD {
                    write_log(data.get(..len).unwrap_or(&[]));
                    committed.store(0, Release);
                    len = 0;
                }
                let n = rec.encode(data.get_mut(len..).unwrap_or(&mut []));
                if len == 0 {
                    *first = rec.time;
                }
                len += n;
                committed.store(len as u32, Release);
                if flush
                    || len > BUF - MAX_RECORD
                    || rec.time.saturating_sub(*first) >= FLUSH_AGE_NS
                {
                    write_log(data.get(..len).unwrap_or(&[]));
                    committed.store(0, Release);
                }
                s.state.store(IDLE, Release);
                return;
            }
            s.state.store(IDLE, Release);
        }
    }
    emit_direct(rec);
}

fn emit_direct(rec: &Rec) {
    let mut tmp = [0u8; MAX_RECORD];
    let n = rec.encode(&mut tmp);
    write_log(tmp.get(..n).unwrap_or(&[]));
}

/// Writes out every buffer that is not in use and leaves it in `then` (IDLE to keep using it,
/// DEAD at exit). A buffer in use is waited for briefly, then left alone.
fn flush_all(then: u32) {
    for (i, s) in POOL.iter().enumerate() {
        let mut spins = 0;
        loop {
            match s.state.compare_exchange(IDLE, BUSY, Acquire, Relaxed) {
                Ok(_) => {
                    // SAFETY: holding the slot BUSY.
                    unsafe { flush_slot(i) };
                    s.state.store(then, Release);
                    break;
                }
                Err(BUSY) if spins < 100 => {
                    spins += 1;
                    // SAFETY: sched_yield has no preconditions.
                    unsafe { libc::sched_yield() };
                }
                Err(_) => break,
            }
        }
    }
}

/// pthread key destructor: the thread is exiting; write out its buffer and free it.
unsafe extern "C" fn thread_exit(tag: *mut c_void) {
    let e = errno();
    let i = (tag as usize).wrapping_sub(1);
    if let Some(s) = POOL.get(i) {
        let mut spins = 0;
        loop {
            match s.state.compare_exchange(IDLE, BUSY, Acquire, Relaxed) {
                Ok(_) => {
                    // SAFETY: holding the slot BUSY.
                    unsafe { flush_slot(i) };
                    s.state.store(FREE, Release);
                    break;
                }
                Err(BUSY) if spins < 100 => {
                    spins += 1;
                    // SAFETY: sched_yield has no preconditions.
                    unsafe { libc::sched_yield() };
                }
                Err(_) => break,
            }
        }
    }
    let _ = MY_SLOT.try_with(|c| c.set(NO_SLOT));
    set_errno(e);
}

// ---------------------------------------------------------------------------------------------
// The log file.

/// Writes bytes to the log with one `write` (more only if the kernel writes less).
fn write_log(b: &[u8]) {
    if b.is_empty() {
        return;
    }
    let mut fd = LOG_FD.load(Acquire);
    if fd < 0 || !log_fd_is_ours(fd) {
        fd = reopen();
        if fd < 0 {
            return;
        }
    }
    let mut off = 0;
    let mut tries = 0;
    while off < b.len() && tries < 8 {
        let r = sys_write(fd, b.get(off..).unwrap_or(&[]));
        if r > 0 {
            off += r as usize;
        } else if r < 0 && errno() == libc::EINTR {
            tries += 1;
        } else {
            break;
        }
        tries += 1;
    }
}

/// Whether `fd` still is the log file (a program that closes descriptors behind libc's back
/// may have reused the number).
#[allow(clippy::unnecessary_cast)] // dev_t and ino_t are not u64 everywhere
fn log_fd_is_ours(fd: c_int) -> bool {
    sys_fstat(fd).is_some_and(|st| {
        st.st_dev as u64 == LOG_DEV.load(Relaxed) && st.st_ino as u64 == LOG_INO.load(Relaxed)
    })
}

/// Opens the log again after its descriptor was lost; -1 if that fails or another thread is
/// at it.
#[cold]
fn reopen() -> c_int {
    if REOPENING.swap(true, Acquire) {
        return -1;
    }
    let c = conf();
    let fd = sys_open(
        &c.path,
        libc::O_WRONLY | libc::O_APPEND | libc::O_CLOEXEC | libc::O_CREAT,
        0o644,
    );
    let fd = if fd >= 0 {
        if sys_fstat(fd).is_some_and(|st| st.st_size == 0) {
            sys_write(fd, c.header.get(..c.header_len).unwrap_or(&[]));
        }
        adopt(fd)
    } else {
        -1
    };
    REOPENING.store(false, Release);
    fd
}

/// Moves a new log descriptor out of the way of the program's (high, close-on-exec) and makes
/// it the log.
#[allow(clippy::unnecessary_cast)] // dev_t and ino_t are not u64 everywhere
fn adopt(fd: c_int) -> c_int {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid out-pointer.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) };
    let target = if r == 0 {
        (rl.rlim_cur.min(1024) as i64 - 24).clamp(3, 1000) as c_int
    } else {
        3
    };
    let mut fd = fd;
    if fd < target {
        let high = sys_fcntl(fd, libc::F_DUPFD_CLOEXEC, target);
        if high >= 0 {
            sys_close(fd);
            fd = high;
        }
    }
    if let Some(st) = sys_fstat(fd) {
        LOG_DEV.store(st.st_dev as u64, Relaxed);
        LOG_INO.store(st.st_ino as u64, Relaxed);
    }
    LOG_FD.store(fd, Release);
    fd
}

/// Reads the first bytes of a file; `None` when it cannot be opened.
fn read_head(path: &[u8], out: &mut [u8]) -> Option<usize> {
    let fd = sys_open(path, libc::O_RDONLY | libc::O_CLOEXEC, 0);
    if fd < 0 {
        return None;
    }
    let n = sys_read(fd, out);
    sys_close(fd);
    Some(n.max(0) as usize)
}

fn read_start_ticks() -> u64 {
    let mut buf = [0u8; 1024];
    match read_head(b"/proc/self/stat\0", &mut buf) {
        Some(n) => wire::stat_start_ticks(buf.get(..n).unwrap_or(&[])),
        None => 0,
    }
}

/// Sets `c.name` and `c.path` for image `n`; false if they do not fit.
fn set_name(c: &mut Conf, n: u32) -> bool {
    let host = c.host.get(..c.host_len).unwrap_or(&[]);
    c.name_len = wire::log_name(&mut c.name, host, c.pid, n);
    let dir = c.dir.get(..c.dir_len).unwrap_or(&[]);
    let name = c.name.get(..c.name_len).unwrap_or(&[]);
    let total = dir.len() + 1 + name.len() + 1;
    if c.name_len == 0 || total > c.path.len() {
        return false;
    }
    c.path[..dir.len()].copy_from_slice(dir);
    c.path[dir.len()] = b'/';
    c.path[dir.len() + 1..total - 1].copy_from_slice(name);
    c.path[total - 1] = 0;
    true
}

/// The spill file's first bytes: magic and version, then the slot count, the bytes per slot
/// and the header's length, u32 each (read by `causeway_capture::spill`).
const SPILL_MAGIC: [u8; 8] = *b"CWSPILL\x01";

/// `path` (NUL-terminated) with `.spill` appended, NUL-terminated, in `out`; its length.
fn spill_path(path: &[u8], out: &mut [u8; 4096 + 256 + 2 + 8]) -> Option<usize> {
    let n = path.iter().position(|&b| b == 0)?;
    let end = n + b".spill\0".len();
    out.get_mut(..n)?.copy_from_slice(path.get(..n)?);
    out.get_mut(n..end)?.copy_from_slice(b".spill\0");
    Some(end)
}

/// Creates `<log>.spill`, sparse and `SPILL_BYTES` long, maps it shared, and makes it this
/// image's buffers. Without it (no room, no mmap), every record is written at once.
///
/// # Safety
/// Single-threaded (the constructor, a fork child), with no spill mapped.
unsafe fn map_spill(path: &[u8]) {
    let mut p = [0u8; 4096 + 256 + 2 + 8];
    let Some(n) = spill_path(path, &mut p) else {
        return;
    };
    let fd = sys_open(
        &p[..n],
        libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
        0o644,
    );
    if fd < 0 {
        return;
    }
    // SAFETY: ftruncate and mmap of a descriptor this library just opened; the mapping is
    // only used through `slot_mem` while SPILL holds its address.
    let addr = unsafe {
        if libc::ftruncate(fd, SPILL_BYTES as off_t) == 0 {
            libc::mmap(
                core::ptr::null_mut(),
                SPILL_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        } else {
            libc::MAP_FAILED
        }
    };
    sys_close(fd);
    if addr == libc::MAP_FAILED {
        // SAFETY: `p` is NUL-terminated.
        unsafe { libc::syscall(libc::SYS_unlinkat, libc::AT_FDCWD, p.as_ptr(), 0) };
        return;
    }
    let mut head = [0u8; 20];
    head[..8].copy_from_slice(&SPILL_MAGIC);
    head[8..12].copy_from_slice(&(SLOTS as u32).to_le_bytes());
    head[12..16].copy_from_slice(&(SLOT_BYTES as u32).to_le_bytes());
    head[16..20].copy_from_slice(&(SPILL_HEAD as u32).to_le_bytes());
    // SAFETY: the mapping is at least SPILL_HEAD bytes long and writable.
    unsafe { core::ptr::copy_nonoverlapping(head.as_ptr(), addr.cast::<u8>(), head.len()) };
    SPILL.store(addr as usize, Release);
}

/// Lets go of the spill mapping (a fork child's inherited one is the parent's).
///
/// # Safety
/// Single-threaded, as for `map_spill`.
unsafe fn unmap_spill() {
    let addr = SPILL.swap(0, AcqRel);
    if addr != 0 {
        // SAFETY: `addr` is a mapping of SPILL_BYTES made by `map_spill`, and no slot is in
        // use (single-threaded).
        unsafe { libc::munmap(addr as *mut c_void, SPILL_BYTES) };
    }
}

/// At a clean end: removes the spill file when every buffer was written out (a buffer
/// another thread still held stays in it, for a reader to find).
fn remove_spill() {
    if (0..SLOTS).any(|i| slot_committed(i).is_some_and(|len| len.load(Acquire) != 0)) {
        return;
    }
    let mut p = [0u8; 4096 + 256 + 2 + 8];
    if spill_path(&conf().path, &mut p).is_some() {
        // SAFETY: `p` is NUL-terminated.
        unsafe { libc::syscall(libc::SYS_unlinkat, libc::AT_FDCWD, p.as_ptr(), 0) };
    }
}

/// Creates this image's log and writes its header. `origin` START becomes EXEC when the log of
/// an earlier image of the same process (same pid and start time) is there.
///
/// # Safety
/// As for `conf_mut`.
unsafe fn open_log(mut origin: u8, previous: &[u8]) -> bool {
    // SAFETY: the caller guarantees a single thread.
    let c = unsafe { conf_mut() };
    let mut prev = [0u8; 256];
    let mut prev_len = previous.len().min(prev.len());
    prev[..prev_len].copy_from_slice(&previous[..prev_len]);
    // The images this pid already has logs for.
    let mut n = 0u32;
    let mut last = None;
    let mut head = [0u8; 32];
    while n < 100_000 {
        if !set_name(c, n) {
            return false;
        }
        match read_head(&c.path, &mut head) {
            Some(len) => {
                last = Some((n, len >= 32 && head[..5] == *b"CWLOG", head));
                n += 1;
            }
            None => break,
        }
    }
    if origin == origin::START {
        if let Some((m, true, h)) = last {
            let ticks =
                u64::from_le_bytes([h[24], h[25], h[26], h[27], h[28], h[29], h[30], h[31]]);
            if ticks == c.start_ticks && ticks != 0 && set_name(c, m) {
                origin = origin::EXEC;
                prev_len = c.name_len;
                prev[..prev_len].copy_from_slice(&c.name[..prev_len]);
            }
        }
    }
    let mut made_dir = false;
    let mut fd = -1;
    for _ in 0..1000 {
        if !set_name(c, n) {
            return false;
        }
        fd = sys_open(
            &c.path,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_APPEND | libc::O_CLOEXEC,
            0o644,
        );
        if fd >= 0 {
            break;
        }
        match errno() {
            libc::EEXIST => n += 1,
            libc::ENOENT if !made_dir => {
                made_dir = true;
                let mut d = [0u8; 4097];
                d[..c.dir_len].copy_from_slice(&c.dir[..c.dir_len]);
                // SAFETY: `d` is NUL-terminated.
                unsafe { libc::syscall(libc::SYS_mkdirat, libc::AT_FDCWD, d.as_ptr(), 0o777) };
            }
            _ => return false,
        }
    }
    if fd < 0 {
        return false;
    }
    let h = wire::Header {
        origin,
        pid: c.pid,
        ppid: c.ppid,
        image: n,
        start_ticks: c.start_ticks,
        realtime: now(),
        monotonic: clock(libc::CLOCK_MONOTONIC),
        clock_res: clock_res(),
        hostname: c.host.get(..c.host_len).unwrap_or(&[]),
        exe: c.exe.get(..c.exe_len).unwrap_or(&[]),
        argv: c.argv.get(..c.argv_len).unwrap_or(&[]),
        previous: prev.get(..prev_len).unwrap_or(&[]),
    };
    let mut header = [0u8; 65 + 4096 + 8192 + 256 + 64];
    let len = h.encode(&mut header);
    c.header[..len].copy_from_slice(&header[..len]);
    c.header_len = len;
    sys_write(fd, &c.header[..len]);
    adopt(fd);
    // SAFETY: single-threaded, as the caller guarantees; no spill is mapped (the constructor
    // maps none before, a fork child unmapped the parent's).
    unsafe { map_spill(&c.path) };
    true
}

fn clock_res() -> u32 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_getres(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_nsec as u32
}

/// Marks the sockets the process already has (inherited across exec or from the parent).
fn scan_fds() {
    let dfd = sys_open(
        b"/proc/self/fd\0",
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        0,
    );
    if dfd < 0 {
        return;
    }
    let mut buf = [0u8; 4096];
    for _ in 0..1000 {
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe {
            libc::syscall(libc::SYS_getdents64, dfd, buf.as_mut_ptr(), buf.len()) as isize
        };
        if n <= 0 {
            break;
        }
        for name in wire::dirents(buf.get(..n as usize).unwrap_or(&[])) {
            let Some(fd) = wire::parse_fd(name) else {
                continue;
            };
            if fd != dfd && is_socket_fd(fd) {
                kind_of(fd);
            }
        }
    }
    sys_close(dfd);
}

// ---------------------------------------------------------------------------------------------
// Start, fork, exec, exit.

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) = init;

#[used]
#[unsafe(link_section = ".fini_array")]
static FINI: unsafe extern "C" fn() = fini;

/// The constructor: glibc calls it with `argc`, `argv` and `envp`.
unsafe extern "C" fn init(argc: c_int, argv: *const *const c_char, _envp: *const *const c_char) {
    let e = errno();
    ARGC.store(argc, Relaxed);
    ARGV.store(argv.cast_mut(), Relaxed);
    // SAFETY: the constructor runs before the program's threads exist.
    unsafe { start() };
    set_errno(e);
}

/// # Safety
/// Single-threaded (the constructor).
unsafe fn start() {
    // Resolve every real function now, even when not capturing: resolving later would call
    // dlsym (which may allocate and lock) from wherever the first call happens, a signal
    // handler or a fork child included.
    for &f in ALL {
        resolve(f);
    }
    // SAFETY: getenv with a NUL-terminated name; the constructor runs before anything can call
    // setenv concurrently.
    let dir = unsafe { libc::getenv(c"CAUSEWAY_CAPTURE_DIR".as_ptr()) };
    if dir.is_null() {
        return;
    }
    // SAFETY: getenv returns a NUL-terminated string.
    let dir = unsafe { CStr::from_ptr(dir) }.to_bytes();
    if dir.is_empty() || dir.len() >= 4000 {
        return;
    }
    // SAFETY: single-threaded, as the caller guarantees.
    let c = unsafe { conf_mut() };
    c.dir[..dir.len()].copy_from_slice(dir);
    c.dir_len = dir.len();

    // SAFETY: a zeroed utsname is valid; uname fills it.
    let mut uts: libc::utsname = unsafe { core::mem::zeroed() };
    // SAFETY: `uts` is a valid out-pointer.
    if unsafe { libc::uname(&mut uts) } == 0 {
        let name = uts.nodename.map(|b| b as u8);
        let n = name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(name.len())
            .min(64);
        c.host[..n].copy_from_slice(&name[..n]);
        c.host_len = n;
    }
    // SAFETY: the path is NUL-terminated and `exe` valid for its length.
    let n = unsafe {
        libc::syscall(
            libc::SYS_readlinkat,
            libc::AT_FDCWD,
            c"/proc/self/exe".as_ptr(),
            c.exe.as_mut_ptr(),
            c.exe.len(),
        )
    };
    c.exe_len = n.clamp(0, c.exe.len() as i64) as usize;

    let argc = ARGC.load(Relaxed);
    let argv = ARGV.load(Relaxed);
    let mut at = 0;
    if !argv.is_null() {
        for i in 0..argc.max(0) as usize {
            // SAFETY: glibc passes the process's argv: `argc` valid pointers.
            let a = unsafe { *argv.add(i) };
            if a.is_null() {
                break;
            }
            // SAFETY: each argument is a NUL-terminated string.
            let a = unsafe { CStr::from_ptr(a) }.to_bytes_with_nul();
            if at + a.len() > c.argv.len() {
                break;
            }
            c.argv[at..at + a.len()].copy_from_slice(a);
            at += a.len();
        }
    }
    c.argv_len = at;
    // SAFETY: getpid/getppid cannot fail.
    c.pid = unsafe { libc::getpid() } as u32;
    // SAFETY: as above.
    c.ppid = unsafe { libc::getppid() } as u32;
    c.start_ticks = read_start_ticks();

    scan_fds();
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is a valid out-pointer; `thread_exit` has the destructor's signature.
    if unsafe { libc::pthread_key_create(&mut key, Some(thread_exit)) } == 0 {
        KEY.store(key, Relaxed);
    }
    // SAFETY: registering handlers with the right signature.
    unsafe { libc::pthread_atfork(Some(atfork_prepare), None, Some(atfork_child)) };
    // SAFETY: single-threaded; `c` is not used after this.
    if unsafe { open_log(origin::START, &[]) } {
        ENABLED.store(true, Release);
    }
}

/// Before a fork, in the forking thread: its buffer is written out, so that what it logged
/// before the fork is in the parent's log before the child's log exists.
unsafe extern "C" fn atfork_prepare() {
    if !on() {
        return;
    }
    let e = errno();
    let cur = MY_SLOT.try_with(Cell::get).unwrap_or(NO_SLOT);
    if let Some(s) = POOL.get(cur as usize) {
        if s.state
            .compare_exchange(IDLE, BUSY, Acquire, Relaxed)
            .is_ok()
        {
            // SAFETY: holding the slot BUSY.
            unsafe { flush_slot(cur as usize) };
            s.state.store(IDLE, Release);
        }
    }
    set_errno(e);
}

/// In a fork child, before `fork` returns there: the child gets a log of its own.
unsafe extern "C" fn atfork_child() {
    if !on() {
        return;
    }
    let e = errno();
    // SAFETY: a fork child has one thread.
    let c = unsafe { conf_mut() };
    let mut prev = [0u8; 256];
    let prev_len = c.name_len.min(256);
    prev[..prev_len].copy_from_slice(&c.name[..prev_len]);
    c.ppid = c.pid;
    // SAFETY: getpid cannot fail.
    c.pid = unsafe { libc::getpid() } as u32;
    c.start_ticks = read_start_ticks();
    let _ = MY_TID.try_with(|t| t.set(0));
    let mine = MY_SLOT.try_with(Cell::get).unwrap_or(NO_SLOT) as usize;
    for (i, s) in POOL.iter().enumerate() {
        if i != mine {
            s.state.store(FREE, Relaxed);
        }
    }
    // The spill mapping is the parent's (shared): the child lets go of it untouched, and
    // `open_log` maps a spill file of its own. Records the parent had buffered stay the
    // parent's.
    // SAFETY: a fork child has one thread.
    unsafe { unmap_spill() };
    let old = LOG_FD.swap(-1, AcqRel);
    if old >= 0 {
        sys_close(old);
    }
    CLOSED.store(false, Relaxed);
    // SAFETY: single-threaded; `c` is not used after this.
    if !unsafe { open_log(origin::FORK, &prev[..prev_len]) } {
        ENABLED.store(false, Relaxed);
    }
    set_errno(e);
}

unsafe extern "C" fn fini() {
    finish(None);
}

/// The process is leaving: write out every buffer, then the end-of-log record.
fn finish(status: Option<c_int>) {
    if !on() || CLOSED.swap(true, AcqRel) {
        return;
    }
    let e = errno();
    flush_all(DEAD);
    let mut r = Rec::new(code::END, now(), tid(), -1, 0);
    r.arg = status.map(i64::from);
    emit_direct(&r);
    remove_spill();
    set_errno(e);
}

fn do_fork(call: u8) -> pid_t {
    let Some(real) = real!(Fork: unsafe extern "C" fn() -> pid_t) else {
        return missing();
    };
    let t = now();
    // SAFETY: fork takes no arguments; the child's state is reset by `atfork_child`.
    let pid = unsafe { real() };
    if on() {
        let e = errno();
        if pid == 0 {
            emit(&Rec::new(call, now(), tid(), -1, 0));
        } else {
            let mut r = Rec::new(call, t, tid(), -1, i64::from(pid));
            if pid < 0 {
                r.errno = Some(e as u16);
            }
            emit(&r);
        }
        set_errno(e);
    }
    pid
}

/// Before an exec: write out every buffer and the exec record itself, so nothing is lost if
/// the exec succeeds.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn before_exec(call: u8, path: *const c_char, arg: Option<i64>) {
    if !on() {
        return;
    }
    let e = errno();
    flush_all(IDLE);
    let p = if path.is_null() {
        &[][..]
    } else {
        // SAFETY: the caller guarantees a NUL-terminated string.
        unsafe { CStr::from_ptr(path) }.to_bytes()
    };
    let mut r = Rec::new(call, now(), tid(), -1, 0);
    r.path = Some(p);
    r.arg = arg;
    emit_direct(&r);
    set_errno(e);
}

/// After an exec returned (it failed).
fn after_exec(call: u8, ret: c_int) -> c_int {
    if on() {
        let e = errno();
        let mut r = Rec::new(call, now(), tid(), -1, i64::from(ret));
        r.errno = Some(e as u16);
        emit(&r);
        set_errno(e);
    }
    ret
}

// ---------------------------------------------------------------------------------------------
// Logging helpers shared by the wrappers.

/// `MSG_*` flags worth a record field: all but the ones that change nothing about the bytes.
fn interesting_flags(flags: c_int) -> Option<u32> {
    let boring =
        libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC | libc::MSG_WAITALL;
    let f = flags & !boring;
    (f != 0).then_some(f as u32)
}

fn would_block(ret: i64, err: c_int) -> bool {
    ret < 0 && (err == libc::EAGAIN || err == libc::EWOULDBLOCK)
}

/// What a send or recv call moved.
struct Xfer {
    call: u8,
    fd: c_int,
    time: u64,
    ret: i64,
    err: c_int,
    entry: u8,
    send: bool,
    hash: Option<u64>,
    peer: Option<Ep>,
    flags: c_int,
    arg: Option<i64>,
    batch: Option<(u32, u32)>,
}

fn log_xfer(x: &Xfer) {
    let mut r = Rec::new(x.call, x.time, tid(), x.fd, x.ret);
    if x.ret < 0 {
        r.errno = Some(x.err as u16);
    }
    let dgram = fdtab::is_dgram(x.entry);
    let local = if dgram && x.send && x.ret >= 0 && x.entry & fdtab::LOCAL_LOGGED == 0 {
        fdtab::add(x.fd, fdtab::LOCAL_LOGGED);
        Some(sockname(x.fd))
    } else {
        None
    };
    r.local = local.as_ref();
    r.peer = x.peer.as_ref();
    r.hash = if dgram { x.hash } else { None };
    r.msg_flags = interesting_flags(x.flags);
    r.arg = x.arg;
    r.batch = x.batch;
    emit(&r);
}

/// Whether a `read`/`write`-style call on `fd` is to be logged, and the socket's entry.
#[inline(always)]
fn socket_entry(fd: c_int) -> u8 {
    let e = fdtab::get(fd);
    if e != 0 {
        return e;
    }
    if fd >= fdtab::SIZE as c_int && on() && is_socket_fd(fd) {
        return kind_of(fd);
    }
    0
}

// ---------------------------------------------------------------------------------------------
// The interposed entry points. Each forwards its arguments unchanged to the real function;
// the caller's obligations for that function are ours to pass on.

/// `socket(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    let Some(real) = real!(Socket: Fd3Fn) else {
        return missing();
    };
    // SAFETY: forwarding the caller's arguments.
    let fd = unsafe { real(domain, ty, protocol) };
    if on() {
        let e = errno();
        if fd >= 0 {
            fdtab::set(fd, fdtab::entry(domain, ty));
        }
        let mut r = Rec::new(code::SOCKET, now(), tid(), fd, i64::from(fd));
        r.socket = Some((domain as u16, (ty & 0xf) as u16, protocol as u16));
        if fd < 0 {
            r.errno = Some(e as u16);
        }
        emit(&r);
        set_errno(e);
    }
    fd
}

/// `socketpair(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn socketpair(
    domain: c_int,
    ty: c_int,
    protocol: c_int,
    sv: *mut c_int,
) -> c_int {
    let Some(real) =
        real!(Socketpair: unsafe extern "C" fn(c_int, c_int, c_int, *mut c_int) -> c_int)
    else {
        return missing();
    };
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(domain, ty, protocol, sv) };
    if on() {
        let e = errno();
        let (mut a, mut b) = (-1, -1);
        if ret == 0 && !sv.is_null() {
            // SAFETY: on success the kernel wrote two descriptors to `sv`.
            (a, b) = unsafe { (*sv, *sv.add(1)) };
            let entry = fdtab::entry(domain, ty);
            fdtab::set(a, entry);
            fdtab::set(b, entry);
        }
        let mut r = Rec::new(code::SOCKETPAIR, now(), tid(), a, i64::from(ret));
        r.socket = Some((domain as u16, (ty & 0xf) as u16, protocol as u16));
        if ret == 0 {
            r.fd2 = Some(b);
        } else {
            r.errno = Some(e as u16);
        }
        emit(&r);
        set_errno(e);
    }
    ret
}

/// `connect(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let Some(real) = real!(Connect: AddrFn) else {
        return missing();
    };
    if !on() {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { real(fd, addr, len) };
    }
    let t = now();
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(fd, addr, len) };
    let e = errno();
    let entry = kind_of(fd);
    let mut r = Rec::new(code::CONNECT, t, tid(), fd, i64::from(ret));
    let peer = if ret == 0 || e != libc::EFAULT {
        // SAFETY: the kernel read `len` bytes at `addr` (else it would have failed with EFAULT).
        unsafe { arg_ep(addr, len) }
    } else {
        None
    };
    let in_progress = ret == 0 || e == libc::EINPROGRESS || e == libc::EAGAIN;
    let local = in_progress.then(|| sockname(fd));
    if ret < 0 {
        r.errno = Some(e as u16);
    }
    r.peer = peer.as_ref();
    r.local = local.as_ref();
    if entry != 0 {
        r.socket = Some((fdtab::family(entry), fdtab::sock_type(entry), 0));
    }
    if ret == 0 && fdtab::is_unix(entry) && !fdtab::is_dgram(entry) {
        r.peer_pid = peer_pid(fd);
    }
    if ret == 0 && fdtab::is_dgram(entry) {
        fdtab::add(fd, fdtab::LOCAL_LOGGED);
    }
    emit(&r);
    set_errno(e);
    ret
}

fn log_accept(call: u8, fd: c_int, ret: c_int, flags: Option<c_int>) {
    let e = errno();
    if would_block(i64::from(ret), e) {
        return;
    }
    let entry = kind_of(fd);
    let mut r = Rec::new(call, now(), tid(), fd, i64::from(ret));
    r.arg = flags.map(i64::from);
    let (local, peer);
    if ret >= 0 {
        fdtab::set(
            ret,
            if entry != 0 {
                entry | fdtab::LOCAL_LOGGED
            } else {
                kind_of(ret)
            },
        );
        local = sockname(ret);
        peer = peername(ret);
        r.local = Some(&local);
        r.peer = Some(&peer);
        r.fd2 = Some(ret);
        if fdtab::is_unix(entry) {
            r.peer_pid = peer_pid(ret);
        }
    } else {
        r.errno = Some(e as u16);
    }
    if entry != 0 {
        r.socket = Some((fdtab::family(entry), fdtab::sock_type(entry), 0));
    }
    // Written out at once: servers often accept on one thread and read and write on another,
    // and a reader must see a connection's birth before its data. An accepting thread that
    // then waits in `poll` would otherwise hold the record until its next socket call, and
    // the other thread's calls on the descriptor would come first in the log.
    emit_and_flush(&r, ret >= 0);
    set_errno(e);
}

/// `accept(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    let Some(real) = real!(Accept: AcceptFn) else {
        return missing();
    };
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(fd, addr, len) };
    if on() {
        log_accept(code::ACCEPT, fd, ret, None);
    }
    ret
}

/// `accept4(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    let Some(real) = real!(Accept4: Accept4Fn) else {
        return missing();
    };
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(fd, addr, len, flags) };
    if on() {
        log_accept(code::ACCEPT4, fd, ret, Some(flags));
    }
    ret
}

/// `bind(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let Some(real) = real!(Bind: AddrFn) else {
        return missing();
    };
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(fd, addr, len) };
    if on() {
        let e = errno();
        let entry = kind_of(fd);
        let local = if ret == 0 {
            Some(sockname(fd))
        } else if e != libc::EFAULT {
            // SAFETY: the kernel read `len` bytes at `addr`.
            unsafe { arg_ep(addr, len) }
        } else {
            None
        };
        let mut r = Rec::new(code::BIND, now(), tid(), fd, i64::from(ret));
        r.local = local.as_ref();
        if ret < 0 {
            r.errno = Some(e as u16);
        } else if fdtab::is_dgram(entry) {
            fdtab::add(fd, fdtab::LOCAL_LOGGED);
        }
        emit(&r);
        set_errno(e);
    }
    ret
}

/// `listen(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    let Some(real) = real!(Listen: Fd2Fn) else {
        return missing();
    };
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(fd, backlog) };
    if on() {
        let e = errno();
        kind_of(fd);
        let local = sockname(fd);
        let mut r = Rec::new(code::LISTEN, now(), tid(), fd, i64::from(ret));
        r.local = Some(&local);
        r.arg = Some(i64::from(backlog));
        if ret < 0 {
            r.errno = Some(e as u16);
        }
        emit(&r);
        set_errno(e);
    }
    ret
}

/// `close(2)`. The log's own descriptor is invisible to the program: closing it fails with
/// EBADF, as it would without the library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let Some(real) = real!(Close: FdFn) else {
        return missing();
    };
    let entry = fdtab::get(fd);
    if entry == 0 {
        if fd == LOG_FD.load(Relaxed) && fd >= 0 {
            set_errno(libc::EBADF);
            return -1;
        }
        // SAFETY: forwarding the caller's argument.
        return unsafe { real(fd) };
    }
    // Forget the descriptor first: once closed, its number may be reused at once. For the
    // same reason the time is taken before the call: another thread's `socket` or `accept`
    // that gets the number back is stamped after it returns, so always after this close,
    // and a reader that orders records by time never sees the new socket closed.
    fdtab::clear(fd);
    let t = now();
    // SAFETY: forwarding the caller's argument.
    let ret = unsafe { real(fd) };
    if on() {
        let e = errno();
        let mut r = Rec::new(code::CLOSE, t, tid(), fd, i64::from(ret));
        if ret < 0 {
            r.errno = Some(e as u16);
        }
        emit(&r);
        set_errno(e);
    }
    ret
}

/// Logs a close record for every known socket in `first..=last` and forgets them.
fn close_known(call: u8, first: c_uint, last: c_uint) {
    let t = now();
    fdtab::for_each_in(first, last, |fd, _| {
        fdtab::clear(fd);
        if on() {
            emit(&Rec::new(call, t, tid(), fd, 0));
        }
    });
}

/// `close_range(2)`: the log's descriptor is left open.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let Some(real) = real!(CloseRange: unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int) else {
        return missing();
    };
    let log = LOG_FD.load(Relaxed);
    let ret = if log >= 0 && (first..=last).contains(&(log as c_uint)) {
        let log = log as c_uint;
        let mut ret = 0;
        if log > first {
            // SAFETY: forwarding the caller's arguments, split around the log's descriptor.
            ret = unsafe { real(first, log - 1, flags) };
        }
        if ret == 0 && log < last {
            // SAFETY: as above.
            ret = unsafe { real(log + 1, last, flags) };
        }
        ret
    } else {
        // SAFETY: forwarding the caller's arguments.
        unsafe { real(first, last, flags) }
    };
    if ret == 0 && flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        let e = errno();
        close_known(code::CLOSE_RANGE, first, last);
        set_errno(e);
    }
    ret
}

/// `closefrom(3)`: the log's descriptor is left open.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn closefrom(low: c_int) {
    let Some(real) = real!(Closefrom: unsafe extern "C" fn(c_int)) else {
        return;
    };
    let log = LOG_FD.load(Relaxed);
    if log >= 0 && log >= low {
        if log > low {
            // SAFETY: close_range with integer arguments touches no memory.
            let r = unsafe { libc::syscall(libc::SYS_close_range, low.max(0), log - 1, 0) };
            if r != 0 {
                for fd in low.max(0)..log {
                    sys_close(fd);
                }
            }
        }
        // SAFETY: forwarding, from above the log's descriptor.
        unsafe { real(log + 1) };
    } else {
        // SAFETY: forwarding the caller's argument.
        unsafe { real(low) };
    }
    let e = errno();
    close_known(code::CLOSEFROM, low.max(0) as c_uint, c_uint::MAX);
    set_errno(e);
}

/// `shutdown(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    let Some(real) = real!(Shutdown: Fd2Fn) else {
        return missing();
    };
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(fd, how) };
    if on() {
        let e = errno();
        kind_of(fd);
        let mut r = Rec::new(code::SHUTDOWN, now(), tid(), fd, i64::from(ret));
        r.arg = Some(i64::from(how));
        if ret < 0 {
            r.errno = Some(e as u16);
        }
        emit(&r);
        set_errno(e);
    }
    ret
}

// --- send family -----------------------------------------------------------------------------

/// `send(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    let Some(real) = real!(Send: SendFn) else {
        return missing() as ssize_t;
    };
    if !on() {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { real(fd, buf, len, flags) };
    }
    let t = now();
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(fd, buf, len, flags) };
    let e = errno();
    if !would_block(ret as i64, e) {
        let entry = kind_of(fd);
        let hash = (fdtab::is_dgram(entry) && ret >= 0)
            // SAFETY: the kernel just read `ret` <= `len` bytes from `buf`.
            .then(|| unsafe { hash_buf(buf, (ret as usize).min(len)) });
        log_xfer(&Xfer {
            call: code::SEND,
            fd,
            time: t,
            ret: ret as i64,
            err: e,
            entry,
            send: true,
            hash,
            peer: None,
            flags,
            arg: None,
            batch: None,
        });
        set_errno(e);
    }
    ret
}

/// `sendto(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    addr: *const sockaddr,
    alen: socklen_t,
) -> ssize_t {
    let Some(real) = real!(Sendto: SendtoFn) else {
        return missing() as ssize_t;
    };
    if !on() {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { real(fd, buf, len, flags, addr, alen) };
    }
    let t = now();
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(fd, buf, len, flags, addr, alen) };
    let e = errno();
    if !would_block(ret as i64, e) {
        let entry = kind_of(fd);
        let hash = (fdtab::is_dgram(entry) && ret >= 0)
            // SAFETY: the kernel just read `ret` <= `len` bytes from `buf`.
            .then(|| unsafe { hash_buf(buf, (ret as usize).min(len)) });
        let peer = if e != libc::EFAULT || ret >= 0 {
            // SAFETY: the kernel read the address (the call succeeded or failed otherwise than
            // with EFAULT).
            unsafe { arg_ep(addr, alen) }
        } else {
            None
        };
        log_xfer(&Xfer {
            call: code::SENDTO,
            fd,
            time: t,
            ret: ret as i64,
            err: e,
            entry,
            send: true,
            hash,
            peer,
            flags,
            arg: None,
            batch: None,
        });
        set_errno(e);
    }
    ret
}

/// The peer named in a msghdr (at most `name_cap` bytes of it), and the hash of its first `n`
/// bytes if `hash`.
///
/// # Safety
/// `msg` is a valid msghdr the kernel just used to move `n` bytes, whose name buffer holds at
/// least `min(msg_namelen, name_cap)` bytes.
unsafe fn msg_parts(
    msg: *const msghdr,
    n: usize,
    hash: bool,
    name_cap: socklen_t,
) -> (Option<Ep>, Option<u64>) {
    if msg.is_null() {
        return (None, None);
    }
    // SAFETY: the caller guarantees a valid msghdr.
    let m = unsafe { &*msg };
    let peer = if m.msg_name.is_null() || m.msg_namelen == 0 {
        None
    } else {
        // SAFETY: the kernel used `msg_namelen` bytes at `msg_name` (and wrote at most
        // `name_cap`, the buffer's size, for a receive).
        unsafe { arg_ep(m.msg_name.cast::<sockaddr>(), m.msg_namelen.min(name_cap)) }
    };
    // SAFETY: the kernel moved `n` bytes through these iovecs.
    let h = hash.then(|| unsafe { hash_iov(m.msg_iov, m.msg_iovlen, n) });
    (peer, h)
}

/// `sendmsg(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    let Some(real) = real!(Sendmsg: SendmsgFn) else {
        return missing() as ssize_t;
    };
    if !on() {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { real(fd, msg, flags) };
    }
    let t = now();
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(fd, msg, flags) };
    let e = errno();
    if !would_block(ret as i64, e) {
        let entry = kind_of(fd);
        let (peer, hash) = if ret >= 0 {
            // SAFETY: the call succeeded, so `msg` is valid and `ret` bytes were moved.
            unsafe { msg_parts(msg, ret as usize, fdtab::is_dgram(entry), socklen_t::MAX) }
        } else {
            (None, None)
        };
        log_xfer(&Xfer {
            call: code::SENDMSG,
            fd,
            time: t,
            ret: ret as i64,
            err: e,
            entry,
            send: true,
            hash,
            peer,
            flags,
            arg: None,
            batch: None,
        });
        set_errno(e);
    }
    ret
}

/// Batch entries whose name-buffer sizes `recvmmsg` keeps, to read the senders' addresses.
const MMSG_CAPS: usize = 64;

/// The name-buffer sizes of the first entries of a batch (`socklen_t::MAX` for a send, where
/// the kernel only reads them).
///
/// # Safety
/// `vec` is NULL or valid for `vlen` entries.
unsafe fn name_caps(vec: *const mmsghdr, vlen: c_uint, send: bool) -> [socklen_t; MMSG_CAPS] {
    let mut caps = [if send { socklen_t::MAX } else { 0 }; MMSG_CAPS];
    if !send && !vec.is_null() {
        for (i, c) in caps.iter_mut().enumerate().take(vlen as usize) {
            // SAFETY: `i < vlen`: a valid entry.
            *c = unsafe { (*vec.add(i)).msg_hdr.msg_namelen };
        }
    }
    caps
}

/// One record per message of a `sendmmsg`/`recvmmsg` batch.
///
/// # Safety
/// `vec` is valid for `ret` entries that the kernel just filled in.
#[allow(clippy::too_many_arguments)]
unsafe fn log_mmsg(
    call: u8,
    send: bool,
    fd: c_int,
    t: u64,
    vec: *const mmsghdr,
    ret: c_int,
    flags: c_int,
    caps: &[socklen_t; MMSG_CAPS],
) {
    let e = errno();
    if would_block(i64::from(ret), e) {
        return;
    }
    let entry = kind_of(fd);
    let mut x = Xfer {
        call,
        fd,
        time: t,
        ret: i64::from(ret),
        err: e,
        entry,
        send,
        hash: None,
        peer: None,
        flags,
        arg: None,
        batch: None,
    };
    if ret < 0 || vec.is_null() {
        log_xfer(&x);
    } else {
        for i in 0..ret as usize {
            // SAFETY: `i < ret`, and the caller guarantees `ret` valid entries.
            let m = unsafe { &*vec.add(i) };
            // Name buffers of entries past the first MMSG_CAPS are not read (their sizes were not
            // kept).
            let cap = caps.get(i).copied().unwrap_or(0);
            // SAFETY: the kernel moved `msg_len` bytes through this entry's msghdr, whose name
            // buffer holds `cap` bytes.
            let (peer, hash) =
                unsafe { msg_parts(&m.msg_hdr, m.msg_len as usize, fdtab::is_dgram(entry), cap) };
            x.ret = i64::from(m.msg_len);
            x.peer = peer;
            x.hash = hash;
            x.batch = Some((i as u32, ret as u32));
            x.entry = fdtab::get(fd).max(entry);
            log_xfer(&x);
        }
    }
    set_errno(e);
}

/// `sendmmsg(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmmsg(
    fd: c_int,
    vec: *mut mmsghdr,
    vlen: c_uint,
    flags: c_int,
) -> c_int {
    let Some(real) = real!(Sendmmsg: SendmmsgFn) else {
        return missing();
    };
    if !on() {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { real(fd, vec, vlen, flags) };
    }
    let t = now();
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(fd, vec, vlen, flags) };
    // SAFETY: sends only read the name buffers.
    let caps = unsafe { name_caps(vec, vlen, true) };
    // SAFETY: on success the kernel filled `ret` entries of `vec`.
    unsafe { log_mmsg(code::SENDMMSG, true, fd, t, vec, ret, flags, &caps) };
    ret
}

/// `write(2)`: logged only on sockets.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    let Some(real) = real!(Write: WriteFn) else {
        return missing() as ssize_t;
    };
    let entry = socket_entry(fd);
    if entry == 0 {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { real(fd, buf, n) };
    }
    let t = now();
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(fd, buf, n) };
    let e = errno();
    if !would_block(ret as i64, e) {
        let hash = (fdtab::is_dgram(entry) && ret >= 0)
            // SAFETY: the kernel just read `ret` <= `n` bytes from `buf`.
            .then(|| unsafe { hash_buf(buf, (ret as usize).min(n)) });
        log_xfer(&Xfer {
            call: code::WRITE,
            fd,
            time: t,
            ret: ret as i64,
            err: e,
            entry,
            send: true,
            hash,
            peer: None,
            flags: 0,
            arg: None,
            batch: None,
        });
        set_errno(e);
    }
    ret
}

/// `writev(2)`: logged only on sockets.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    let Some(real) = real!(Writev: IovFn) else {
        return missing() as ssize_t;
    };
    let entry = socket_entry(fd);
    if entry == 0 {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { real(fd, iov, cnt) };
    }
    let t = now();
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(fd, iov, cnt) };
    let e = errno();
    if !would_block(ret as i64, e) {
        let hash = (fdtab::is_dgram(entry) && ret >= 0)
            // SAFETY: the kernel just read `ret` bytes through these `cnt` iovecs.
            .then(|| unsafe { hash_iov(iov, cnt.max(0) as usize, ret as usize) });
        log_xfer(&Xfer {
            call: code::WRITEV,
            fd,
            time: t,
            ret: ret as i64,
            err: e,
            entry,
            send: true,
            hash,
            peer: None,
            flags: 0,
            arg: None,
            batch: None,
        });
        set_errno(e);
    }
    ret
}

fn do_sendfile(f: F, out: c_int, inp: c_int, off: *mut off_t, count: size_t) -> ssize_t {
    let p = match real_addr(f) {
        0 => real_addr(F::Sendfile),
        p => p,
    };
    if p == 0 {
        return missing() as ssize_t;
    }
    // SAFETY: `p` is libc's sendfile or sendfile64 (the same function on 64-bit Linux).
    let real = unsafe { core::mem::transmute::<usize, SendfileFn>(p) };
    let entry = socket_entry(out);
    if entry == 0 {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { real(out, inp, off, count) };
    }
    let t = now();
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(out, inp, off, count) };
    let e = errno();
    if !would_block(ret as i64, e) {
        log_xfer(&Xfer {
            call: code::SENDFILE,
            fd: out,
            time: t,
            ret: ret as i64,
            err: e,
            entry,
            send: true,
            hash: None,
            peer: None,
            flags: 0,
            arg: Some(i64::from(inp)),
            batch: None,
        });
        set_errno(e);
    }
    ret
}

/// `sendfile(2)`: logged only when the output is a socket.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile(
    out: c_int,
    inp: c_int,
    off: *mut off_t,
    count: size_t,
) -> ssize_t {
    do_sendfile(F::Sendfile, out, inp, off, count)
}

/// `sendfile64`: the same.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    inp: c_int,
    off: *mut off_t,
    count: size_t,
) -> ssize_t {
    do_sendfile(F::Sendfile64, out, inp, off, count)
}

// --- recv family -----------------------------------------------------------------------------

/// Logs a recv-family call that read `ret` bytes into `buf` (of `cap` bytes).
///
/// # Safety
/// `buf` is valid for `cap` bytes, of which the kernel filled `min(ret, cap)`.
#[allow(clippy::too_many_arguments)]
unsafe fn log_recv(
    call: u8,
    fd: c_int,
    entry: u8,
    ret: ssize_t,
    e: c_int,
    buf: *const c_void,
    cap: usize,
    peer: Option<Ep>,
    flags: c_int,
) {
    if would_block(ret as i64, e) {
        return;
    }
    let t = now();
    let hash = (fdtab::is_dgram(entry) && ret >= 0)
        // SAFETY: the caller guarantees the kernel filled these bytes.
        .then(|| unsafe { hash_buf(buf, (ret as usize).min(cap)) });
    log_xfer(&Xfer {
        call,
        fd,
        time: t,
        ret: ret as i64,
        err: e,
        entry,
        send: false,
        hash,
        peer: if ret >= 0 { peer } else { None },
        flags,
        arg: None,
        batch: None,
    });
    set_errno(e);
}

/// `recv(2)`. On a datagram socket it runs as `recvfrom` with an address buffer of the
/// library's, to learn the sender (the same call for the kernel).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    let Some(real) = real!(Recv: RecvFn) else {
        return missing() as ssize_t;
    };
    if !on() {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { real(fd, buf, len, flags) };
    }
    let entry = kind_of(fd);
    if fdtab::is_dgram(entry) {
        if let Some(rf) = real!(Recvfrom: RecvfromFn) {
            // SAFETY: a zeroed sockaddr_storage is valid.
            let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
            let mut sl = core::mem::size_of::<libc::sockaddr_storage>() as socklen_t;
            // SAFETY: the caller's arguments, plus a valid address buffer of ours.
            let ret = unsafe {
                rf(
                    fd,
                    buf,
                    len,
                    flags,
                    (&mut ss as *mut libc::sockaddr_storage).cast(),
                    &mut sl,
                )
            };
            let e = errno();
            let peer = (sl > 0).then(|| Ep::from_sockaddr(storage_bytes(&ss, sl as usize)));
            // SAFETY: the kernel filled `min(ret, len)` bytes of `buf`.
            unsafe { log_recv(code::RECV, fd, entry, ret, e, buf, len, peer, flags) };
            return ret;
        }
    }
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(fd, buf, len, flags) };
    let e = errno();
    // SAFETY: the kernel filled `min(ret, len)` bytes of `buf`.
    unsafe { log_recv(code::RECV, fd, entry, ret, e, buf, len, None, flags) };
    ret
}

/// `recvfrom(2)`. On a datagram socket a NULL address buffer is replaced by the library's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    let Some(real) = real!(Recvfrom: RecvfromFn) else {
        return missing() as ssize_t;
    };
    if !on() {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { real(fd, buf, len, flags, addr, alen) };
    }
    let entry = kind_of(fd);
    // SAFETY: a zeroed sockaddr_storage is valid.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let mut sl = core::mem::size_of::<libc::sockaddr_storage>() as socklen_t;
    let ours = addr.is_null() && fdtab::is_dgram(entry);
    let cap = if alen.is_null() {
        0
    } else {
        // SAFETY: a non-null `alen` points to the caller's buffer length.
        unsafe { *alen }
    };
    let (a, l) = if ours {
        (
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut sl as *mut socklen_t,
        )
    } else {
        (addr, alen)
    };
    // SAFETY: the caller's arguments, or a valid address buffer of ours in place of NULL.
    let ret = unsafe { real(fd, buf, len, flags, a, l) };
    let e = errno();
    let peer = if ret < 0 || !fdtab::is_dgram(entry) {
        None
    } else if ours {
        (sl > 0).then(|| Ep::from_sockaddr(storage_bytes(&ss, sl as usize)))
    } else if !addr.is_null() && !alen.is_null() {
        // SAFETY: the call succeeded: the kernel wrote the address, truncated to the caller's
        // buffer of `cap` bytes, and its full length to `alen`.
        unsafe { arg_ep(addr, (*alen).min(cap)) }
    } else {
        None
    };
    // SAFETY: the kernel filled `min(ret, len)` bytes of `buf`.
    unsafe { log_recv(code::RECVFROM, fd, entry, ret, e, buf, len, peer, flags) };
    ret
}

/// `recvmsg(2)`. On a datagram socket a NULL `msg_name` is replaced by the library's (in a
/// copy of the msghdr; the fields the kernel updates are copied back).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    let Some(real) = real!(Recvmsg: RecvmsgFn) else {
        return missing() as ssize_t;
    };
    if !on() || msg.is_null() {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { real(fd, msg, flags) };
    }
    let entry = kind_of(fd);
    let dgram = fdtab::is_dgram(entry);
    // SAFETY: `msg` is non-null and the caller guarantees it valid.
    let substitute = dgram && unsafe { (*msg).msg_name.is_null() };
    let ret;
    let e;
    let peer;
    let hash;
    if substitute {
        // SAFETY: a zeroed sockaddr_storage is valid.
        let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
        // SAFETY: `msg` is valid; msghdr is plain data.
        let mut copy: msghdr = unsafe { core::ptr::read(msg) };
        copy.msg_name = (&mut ss as *mut libc::sockaddr_storage).cast();
        copy.msg_namelen = core::mem::size_of::<libc::sockaddr_storage>() as socklen_t;
        // SAFETY: the caller's msghdr with a valid address buffer of ours.
        ret = unsafe { real(fd, &mut copy, flags) };
        e = errno();
        // SAFETY: writing back the fields the kernel updates to the caller's valid msghdr.
        unsafe {
            (*msg).msg_controllen = copy.msg_controllen;
            (*msg).msg_flags = copy.msg_flags;
        }
        peer = (ret >= 0 && copy.msg_namelen > 0)
            .then(|| Ep::from_sockaddr(storage_bytes(&ss, copy.msg_namelen as usize)));
        // SAFETY: the kernel moved `ret` bytes through the caller's iovecs.
        hash = (ret >= 0).then(|| unsafe { hash_iov(copy.msg_iov, copy.msg_iovlen, ret as usize) });
    } else {
        // SAFETY: `msg` is valid (checked non-null above).
        let cap = unsafe { (*msg).msg_namelen };
        // SAFETY: forwarding the caller's arguments.
        ret = unsafe { real(fd, msg, flags) };
        e = errno();
        (peer, hash) = if ret >= 0 {
            // SAFETY: the call succeeded with this msghdr, moving `ret` bytes; its name buffer
            // holds `cap` bytes.
            unsafe { msg_parts(msg, ret as usize, dgram, cap) }
        } else {
            (None, None)
        };
    }
    if would_block(ret as i64, e) {
        return ret;
    }
    log_xfer(&Xfer {
        call: code::RECVMSG,
        fd,
        time: now(),
        ret: ret as i64,
        err: e,
        entry,
        send: false,
        hash: if dgram { hash } else { None },
        peer: if dgram { peer } else { None },
        flags,
        arg: None,
        batch: None,
    });
    set_errno(e);
    ret
}

/// `recvmmsg(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmmsg(
    fd: c_int,
    vec: *mut mmsghdr,
    vlen: c_uint,
    flags: c_int,
    timeout: *mut libc::timespec,
) -> c_int {
    let Some(real) = real!(Recvmmsg: RecvmmsgFn) else {
        return missing();
    };
    if !on() {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { real(fd, vec, vlen, flags, timeout) };
    }
    // SAFETY: the caller passes `vlen` valid entries.
    let caps = unsafe { name_caps(vec, vlen, false) };
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(fd, vec, vlen, flags, timeout) };
    // SAFETY: on success the kernel filled `ret` entries of `vec`.
    unsafe { log_mmsg(code::RECVMMSG, false, fd, now(), vec, ret, flags, &caps) };
    ret
}

/// `read(2)`: logged only on sockets.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    let Some(real) = real!(Read: ReadFn) else {
        return missing() as ssize_t;
    };
    let entry = socket_entry(fd);
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(fd, buf, n) };
    if entry != 0 {
        let e = errno();
        // SAFETY: the kernel filled `min(ret, n)` bytes of `buf`.
        unsafe { log_recv(code::READ, fd, entry, ret, e, buf, n, None, 0) };
    }
    ret
}

/// `readv(2)`: logged only on sockets.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    let Some(real) = real!(Readv: IovFn) else {
        return missing() as ssize_t;
    };
    let entry = socket_entry(fd);
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(fd, iov, cnt) };
    if entry != 0 {
        let e = errno();
        if !would_block(ret as i64, e) {
            let hash = (fdtab::is_dgram(entry) && ret >= 0)
                // SAFETY: the kernel wrote `ret` bytes through these iovecs.
                .then(|| unsafe { hash_iov(iov, cnt.max(0) as usize, ret as usize) });
            log_xfer(&Xfer {
                call: code::READV,
                fd,
                time: now(),
                ret: ret as i64,
                err: e,
                entry,
                send: false,
                hash,
                peer: None,
                flags: 0,
                arg: None,
                batch: None,
            });
            set_errno(e);
        }
    }
    ret
}

/// `__read_chk` (`_FORTIFY_SOURCE`): the check, then our `read`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        if let Some(real) =
            real!(ReadChk: unsafe extern "C" fn(c_int, *mut c_void, size_t, size_t) -> ssize_t)
        {
            // SAFETY: forwarding: libc reports the overflow and aborts.
            return unsafe { real(fd, buf, n, buflen) };
        }
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe { read(fd, buf, n) }
}

/// `__recv_chk` (`_FORTIFY_SOURCE`): the check, then our `recv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    buflen: size_t,
    flags: c_int,
) -> ssize_t {
    if len > buflen {
        if let Some(real) = real!(RecvChk: unsafe extern "C" fn(c_int, *mut c_void, size_t, size_t, c_int) -> ssize_t)
        {
            // SAFETY: forwarding: libc reports the overflow and aborts.
            return unsafe { real(fd, buf, len, buflen, flags) };
        }
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe { recv(fd, buf, len, flags) }
}

/// `__recvfrom_chk` (`_FORTIFY_SOURCE`): the check, then our `recvfrom`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    if len > buflen {
        if let Some(real) = real!(RecvfromChk: unsafe extern "C" fn(
            c_int,
            *mut c_void,
            size_t,
            size_t,
            c_int,
            *mut sockaddr,
            *mut socklen_t,
        ) -> ssize_t)
        {
            // SAFETY: forwarding: libc reports the overflow and aborts.
            return unsafe { real(fd, buf, len, buflen, flags, addr, alen) };
        }
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe { recvfrom(fd, buf, len, flags, addr, alen) }
}

// --- descriptors -----------------------------------------------------------------------------

/// After a dup made `new` from `old`: `new` inherits `old`'s entry; logged when either was a
/// socket (a dup over a socket closes it).
fn log_dup(call: u8, old: c_int, new: c_int, ret: c_int, arg: Option<i64>) {
    let e = errno();
    let entry = fdtab::get(old);
    let before = fdtab::get(new);
    if ret >= 0 && ret != old {
        fdtab::set(ret, entry);
    }
    if on() && (entry != 0 || before != 0) {
        let mut r = Rec::new(call, now(), tid(), old, i64::from(ret));
        if ret >= 0 {
            r.fd2 = Some(ret);
        } else {
            r.errno = Some(e as u16);
        }
        r.arg = arg;
        emit(&r);
    }
    set_errno(e);
}

/// `dup(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup(old: c_int) -> c_int {
    let Some(real) = real!(Dup: FdFn) else {
        return missing();
    };
    // SAFETY: forwarding the caller's argument.
    let ret = unsafe { real(old) };
    if ret >= 0 || fdtab::get(old) != 0 {
        log_dup(code::DUP, old, ret, ret, None);
    }
    ret
}

/// If the program is about to dup onto the log's descriptor, move the log out of the way.
fn clear_way_for(new: c_int, old: c_int) -> bool {
    let log = LOG_FD.load(Relaxed);
    if new != log || log < 0 || old == new {
        return false;
    }
    let moved = sys_fcntl(log, libc::F_DUPFD_CLOEXEC, log + 1);
    if moved >= 0 {
        LOG_FD.store(moved, Release);
        return true;
    }
    false
}

/// `dup2(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    let Some(real) = real!(Dup2: Fd2Fn) else {
        return missing();
    };
    let moved = clear_way_for(new, old);
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(old, new) };
    if ret < 0 && moved {
        // The number the log had would now be free without the library: free it.
        let e = errno();
        sys_close(new);
        set_errno(e);
    }
    if old != new && (ret >= 0 || fdtab::get(old) != 0) {
        log_dup(code::DUP2, old, new, ret, None);
    }
    ret
}

/// `dup3(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let Some(real) = real!(Dup3: Fd3Fn) else {
        return missing();
    };
    let moved = clear_way_for(new, old);
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(old, new, flags) };
    if ret < 0 && moved {
        let e = errno();
        sys_close(new);
        set_errno(e);
    }
    if ret >= 0 || fdtab::get(old) != 0 {
        log_dup(code::DUP3, old, new, ret, Some(i64::from(flags)));
    }
    ret
}

fn do_fcntl(f: F, fd: c_int, cmd: c_int, arg: usize) -> c_int {
    let p = match real_addr(f) {
        0 => real_addr(F::Fcntl),
        p => p,
    };
    if p == 0 {
        return missing();
    }
    // SAFETY: `p` is libc's fcntl or fcntl64, whose prototype this is.
    let real = unsafe { core::mem::transmute::<usize, FcntlFn>(p) };
    // SAFETY: forwarding the caller's arguments; the third is passed on as the word the caller
    // put in its place (an int or a pointer; unused by commands without one).
    let ret = unsafe { real(fd, cmd, arg) };
    if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        let call = if cmd == libc::F_DUPFD {
            code::FCNTL_DUPFD
        } else {
            code::FCNTL_DUPFD_CLOEXEC
        };
        if ret >= 0 || fdtab::get(fd) != 0 {
            log_dup(call, fd, ret, ret, Some(arg as c_int as i64));
        }
    }
    ret
}

/// `fcntl(2)`. The optional third argument is read as a machine word: on x86-64 and AArch64
/// Linux a variadic int or pointer argument travels in the same register as a fixed one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    do_fcntl(F::Fcntl, fd, cmd, arg)
}

/// `fcntl64`: the same.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    do_fcntl(F::Fcntl64, fd, cmd, arg)
}

/// Forget any socket entry under a descriptor number the kernel just handed out for something
/// else (a socket closed behind libc's back leaves one).
fn fresh(fd: c_int) -> c_int {
    if fd >= 0 {
        fdtab::clear(fd);
    }
    fd
}

/// `open(2)`: forgets stale socket entries. The mode is read as in `fcntl`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let Some(real) = real!(Open: OpenFn) else {
        return missing();
    };
    // SAFETY: forwarding the caller's arguments.
    fresh(unsafe { real(path, flags, mode) })
}

/// `open64`: the same.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let Some(real) = real!(Open64: OpenFn) else {
        return missing();
    };
    // SAFETY: forwarding the caller's arguments.
    fresh(unsafe { real(path, flags, mode) })
}

/// `openat(2)`: the same.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat(
    dir: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    let Some(real) = real!(Openat: OpenatFn) else {
        return missing();
    };
    // SAFETY: forwarding the caller's arguments.
    fresh(unsafe { real(dir, path, flags, mode) })
}

/// `openat64`: the same.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat64(
    dir: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    let Some(real) = real!(Openat64: OpenatFn) else {
        return missing();
    };
    // SAFETY: forwarding the caller's arguments.
    fresh(unsafe { real(dir, path, flags, mode) })
}

/// `pipe(2)`: forgets stale socket entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pipe(fds: *mut c_int) -> c_int {
    let Some(real) = real!(Pipe: unsafe extern "C" fn(*mut c_int) -> c_int) else {
        return missing();
    };
    // SAFETY: forwarding the caller's argument.
    let ret = unsafe { real(fds) };
    if ret == 0 {
        // SAFETY: on success the kernel wrote two descriptors.
        unsafe {
            fresh(*fds);
            fresh(*fds.add(1));
        }
    }
    ret
}

/// `pipe2(2)`: the same.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pipe2(fds: *mut c_int, flags: c_int) -> c_int {
    let Some(real) = real!(Pipe2: unsafe extern "C" fn(*mut c_int, c_int) -> c_int) else {
        return missing();
    };
    // SAFETY: forwarding the caller's arguments.
    let ret = unsafe { real(fds, flags) };
    if ret == 0 {
        // SAFETY: on success the kernel wrote two descriptors.
        unsafe {
            fresh(*fds);
            fresh(*fds.add(1));
        }
    }
    ret
}

// --- processes -------------------------------------------------------------------------------

/// `fork(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fork() -> pid_t {
    do_fork(code::FORK)
}

/// `vfork(2)`, run as `fork`: a wrapper cannot call the real `vfork` (the child would return
/// through, and overwrite, the frame the suspended parent returns to). A conforming child only
/// calls exec or `_exit`, which a forked child does just as well.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vfork() -> pid_t {
    do_fork(code::VFORK)
}

/// `execve(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(real) = real!(Execve: ExecveFn) else {
        return missing();
    };
    // SAFETY: `path` is the caller's NUL-terminated path (or NULL).
    unsafe { before_exec(code::EXECVE, path, None) };
    // SAFETY: forwarding the caller's arguments.
    after_exec(code::EXECVE, unsafe { real(path, argv, envp) })
}

/// `execv(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    let Some(real) = real!(Execv: ExecvFn) else {
        return missing();
    };
    // SAFETY: as in `execve`.
    unsafe { before_exec(code::EXECV, path, None) };
    // SAFETY: forwarding the caller's arguments.
    after_exec(code::EXECV, unsafe { real(path, argv) })
}

/// `execvp(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    let Some(real) = real!(Execvp: ExecvFn) else {
        return missing();
    };
    // SAFETY: as in `execve`.
    unsafe { before_exec(code::EXECVP, file, None) };
    // SAFETY: forwarding the caller's arguments.
    after_exec(code::EXECVP, unsafe { real(file, argv) })
}

/// `execvpe(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(real) = real!(Execvpe: ExecveFn) else {
        return missing();
    };
    // SAFETY: as in `execve`.
    unsafe { before_exec(code::EXECVPE, file, None) };
    // SAFETY: forwarding the caller's arguments.
    after_exec(code::EXECVPE, unsafe { real(file, argv, envp) })
}

/// `execveat(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execveat(
    dir: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    flags: c_int,
) -> c_int {
    let Some(real) = real!(Execveat: ExecveatFn) else {
        return missing();
    };
    // SAFETY: as in `execve`.
    unsafe { before_exec(code::EXECVEAT, path, Some(i64::from(dir))) };
    // SAFETY: forwarding the caller's arguments.
    after_exec(code::EXECVEAT, unsafe {
        real(dir, path, argv, envp, flags)
    })
}

/// `fexecve(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(real) = real!(Fexecve: FexecveFn) else {
        return missing();
    };
    // SAFETY: NULL path.
    unsafe { before_exec(code::FEXECVE, core::ptr::null(), Some(i64::from(fd))) };
    // SAFETY: forwarding the caller's arguments.
    after_exec(code::FEXECVE, unsafe { real(fd, argv, envp) })
}

fn leave(f: F, status: c_int) -> ! {
    finish(Some(status));
    if let Some(real) = match f {
        F::ExitUpper => real!(ExitUpper: ExitFn),
        _ => real!(Exit: ExitFn),
    } {
        // SAFETY: forwarding the caller's argument.
        unsafe { real(status) }
    }
    loop {
        // SAFETY: exit_group ends the process; it does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// `_exit(2)`: the buffers are written out and the log closed first.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    leave(F::Exit, status)
}

/// `_Exit(2)`: the same.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    leave(F::ExitUpper, status)
}
