//! `libcauseway_preload.so`: an LD_PRELOAD library that logs a process's socket calls in
//! Causeway's socket-call log format (documented, with its reader, in `causeway_capture`).
//!
//! ```text
//! CAUSEWAY_CAPTURE_DIR=/tmp/cap LD_PRELOAD=target/release/libcauseway_preload.so program ...
//! ```
//!
//! Without `CAUSEWAY_CAPTURE_DIR` the library does nothing (every call goes straight through).
//! With it, each process image writes `<dir>/<hostname>.<pid>.<n>.cwlog`.
//!
//! # What is interposed
//!
//! `socket`, `socketpair`, `connect`, `accept`, `accept4`, `bind`, `listen`, `close`,
//! `close_range`, `closefrom`, `shutdown`; `send`, `sendto`, `sendmsg`, `sendmmsg`, `recv`,
//! `recvfrom`, `recvmsg`, `recvmmsg` (and the `_FORTIFY_SOURCE` forms `__recv_chk`,
//! `__recvfrom_chk`); `read`, `write`, `readv`, `writev`, `sendfile`, `sendfile64`,
//! `__read_chk`, logged only on sockets; `dup`, `dup2`, `dup3`, `fcntl`/`fcntl64`
//! (`F_DUPFD*`), so that duplicated descriptors stay known; `open`, `open64`, `openat`,
//! `openat64`, `pipe`, `pipe2`, only to forget stale entries; `fork`, `vfork`, the exec family
//! (`execve`, `execv`, `execvp`, `execvpe`, `execveat`, `fexecve`), `_exit`, `_Exit`.
//!
//! # Processes
//!
//! - **fork**: `pthread_atfork` handlers write out the forking thread's buffer before the fork
//!   and, in the child, open the child's own log (its header names the parent's); records other
//!   threads of the parent had buffered stay the parent's. Forks that glibc makes internally
//!   (`daemon`) are covered by the same handlers; only `fork`/`vfork` calls get a record.
//! - **vfork** runs as `fork` (a wrapper cannot call the real `vfork` safely); a conforming
//!   vfork child only execs or `_exit`s, which it does the same after a fork.
//! - **exec**: every thread's buffer is written out and the exec record written before the real
//!   call; if it returns, a second record has the error. The next image (same pid, same start
//!   time in `/proc/self/stat`) finds the previous image's log and continues with `n + 1`.
//!   `execl`, `execlp` and `execle` are variadic, which stable Rust cannot define: they are not
//!   interposed, so records buffered by other threads are lost when they succeed.
//! - **exit**: a destructor (`.fini_array`) at `exit()`, and the `_exit`/`_Exit` wrappers, write
//!   out every buffer and the end-of-log record, and remove the spill file.
//! - **death**: the per-thread buffers live in `<log>.spill`, a file mapped shared, not in the
//!   process's memory: when a process dies without its exit handlers (SIGKILL, an unhandled
//!   SIGTERM, abort, the OOM killer, a raw `exit_group`), the kernel keeps what it had
//!   buffered, and `causeway capture` or the next analysis of the directory appends it to the
//!   log (`causeway_capture::spill`). A record counts once the buffer's committed length (a
//!   release store after the record's bytes) covers it: a record half-written at the moment of
//!   death is left out, never misread.
//!
//! # Not changing the program
//!
//! See the `sys` module: `errno` is preserved, nothing allocates or locks on an interposed path
//! (per-thread buffers from a fixed pool, claimed with atomics; the descriptor table is a fixed
//! array of atomic bytes), the library's own I/O uses raw system calls, and its log descriptor
//! sits high (near 1000), is close-on-exec, and is invisible to `close`, `close_range`,
//! `closefrom` and `dup2`.
//!
//! # Known limits
//!
//! - Calls libc makes internally are not seen: `fclose` of an `fdopen`ed socket, stdio on
//!   sockets, name-service lookups (nscd), `posix_spawn` (its child starts a fresh log).
//! - A socket closed that way leaves its table entry; the entry is cleared when the number is
//!   reused through `open*`, `pipe*`, `socket`, `accept*` or a dup, but not other calls that
//!   make descriptors (`epoll_create`, `eventfd`, ...): reads and writes on such a descriptor
//!   would be logged as socket calls.
//! - Sockets inherited at start (across exec, or from a parent that did not run the library) are
//!   known as sockets, but their endpoints are only in the earlier image's log, if any.
//! - `recvmmsg` reports senders for the first 64 messages of a batch; `read`/`readv` on an
//!   unconnected datagram socket do not report the sender.
//! - Buffers are written when full, when a record finds the oldest one 100 ms old, after an
//!   `accept` (another thread may serve the connection: its birth must not come after its
//!   data in the log), at thread exit, fork, exec and exit: a thread that stops making socket
//!   calls keeps its last records until one of those happens (a reader following the log
//!   sees them late). A descriptor closed by a pool thread that keeps its `close` record
//!   past the next `accept` of the same number could still be misread (python's threaded
//!   server closes on the serving thread, which then exits and writes its buffer).
//! - The spill file is 16 MiB long but sparse: only the pages of buffers in use take space
//!   (16 KiB per thread that logged). Without room for it the library writes every record at
//!   once, as it does for threads beyond its 1,024 buffers.
//! - The datagram hash (FNV-1a, a multiply per byte) costs about 1.5 ns per payload byte.
//! - Statically linked programs and programs that make system calls directly are not traced.

#![deny(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod fdtab;
mod hash;
#[allow(unsafe_code)]
mod sys;
mod wire;
