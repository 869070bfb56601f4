//! The socket-call log: the binary format that the LD_PRELOAD library (`causeway-preload`,
//! in `capture/preload/`) writes, its encoding helpers, and a streaming [`Reader`].
//!
//! Layers, bottom up:
//! - [`Syscall`], [`Call`], [`Direction`]: what a record is about;
//! - [`Endpoint`], [`SocketKind`]: socket names and kinds;
//! - [`RecordView`] (checked view over bytes) and [`Record`] (validated, owned), [`LogHeader`];
//! - [`Reader`] (any `Read`, optionally following a growing file), [`Writer`], [`read_dir`].
//!
//! ```
//! use causeway_capture::{Direction, LogHeader, Reader, Record, Syscall, Writer};
//!
//! let header = LogHeader { hostname: "web1".into(), pid: 42, ..Default::default() };
//! let mut w = Writer::new(Vec::new(), &header)?;
//! w.write(&Record::new(Syscall::Write, 1_700_000_000_000_000_000, 42, 5, 512))?;
//! let bytes = w.finish(1_700_000_000_000_000_001, 42)?;
//!
//! let reader = Reader::new(&bytes[..], "web1.42.0.cwlog")?;
//! assert_eq!(reader.header().log_name().to_string(), "web1.42.0.cwlog");
//! let records = reader.collect::<Result<Vec<Record>, _>>()?;
//! assert_eq!(records[0].syscall.direction(), Some(Direction::Send));
//! assert_eq!(records[0].bytes(), Some(512));
//! assert_eq!(records[1].syscall, Syscall::End);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Files
//!
//! One log per process image, in the capture directory (environment variable
//! `CAUSEWAY_CAPTURE_DIR` of the traced programs), named `<hostname>.<pid>.<n>.cwlog`
//! ([`LogName`]). `n` is 0 for a new process and one more after each `exec`: the new image
//! writes a new log whose header names the one before. A `fork` child writes its own log,
//! whose header names the parent's. A log that ends with the end-of-log record was closed by
//! a clean exit; one that ends without it belongs to a process that was killed, called `exec`
//! (its last record then is the exec call), or is still running. Beside a running or killed
//! process's log lies `<log>.spill`, its unwritten buffers ([`spill`]): reading a directory
//! appends a killed process's to its log first.
//!
//! # Format, version 1
//!
//! Binary, little-endian, no alignment. A file is the header followed by records, each
//! prefixed by its length. Records of different threads interleave whole (a writer writes
//! whole records in one `write(2)`), in no particular time order across threads.
//!
//! ## File header
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 5 | magic `CWLOG` |
//! | 5 | 2 | version, u16 = 1 |
//! | 7 | 4 | header length in bytes, u32: records start here; readers skip bytes they do not know before it |
//! | 11 | 1 | origin: 0 start, 1 fork child, 2 exec ([`Origin`]) |
//! | 12 | 4 | pid, u32 |
//! | 16 | 4 | ppid, u32 |
//! | 20 | 4 | image number `n`, u32 |
//! | 24 | 8 | process start time, clock ticks after boot (`/proc/PID/stat` field 22), u64; survives exec |
//! | 32 | 8 | `CLOCK_REALTIME` at the start of the log, ns since the epoch, u64 |
//! | 40 | 8 | `CLOCK_MONOTONIC` at the same moment, ns, u64 |
//! | 48 | 4 | resolution of `CLOCK_REALTIME`, ns, u32 |
//! | 52 | 2+L | host name (`uname`): length u16, bytes |
//! | | 2+L | program path (`/proc/self/exe`): length u16, bytes |
//! | | 2+L | arguments: length u16, then each argument followed by a NUL (at most 8 KiB, whole arguments) |
//! | | 2+L | previous log's file name (parent's for a fork, previous image's for an exec; empty otherwise): length u16, bytes |
//!
//! ## Records
//!
//! A fixed 28-byte header, then the optional fields that the flags name, in flag order:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | record length in bytes including this field, u16 (at least 28) |
//! | 2 | 1 | syscall code ([`Syscall`]) |
//! | 3 | 1 | flags ([`record::flags`]) |
//! | 4 | 8 | timestamp, `CLOCK_REALTIME` ns, u64: at entry for send-family calls and `connect`, at return for every other call |
//! | 12 | 4 | thread id, u32 |
//! | 16 | 4 | descriptor, i32 (-1 when none) |
//! | 20 | 8 | return value, i64: bytes moved, a new descriptor, 0, a child pid, or -1 |
//!
//! | flag | field | encoding |
//! |---|---|---|
//! | 0x01 | errno | u16 (set when the call failed) |
//! | 0x02 | local endpoint | endpoint, below |
//! | 0x04 | peer endpoint | endpoint, below |
//! | 0x08 | socket kind | family u16 (`AF_*`), type u16 (`SOCK_*`), protocol u16 |
//! | 0x10 | peer pid | u32 (`SO_PEERCRED` of a UNIX-domain socket) |
//! | 0x20 | payload hash | u64: 64-bit FNV-1a ([`payload_hash`]) of the datagram bytes actually sent or received (the first `min(ret, buffer size)` bytes, across the iovecs in order) |
//! | 0x40 | second descriptor | i32: accept's new descriptor, a dup's new descriptor, socketpair's second |
//! | 0x80 | extensions | to the end of the record: type u8, length u16, value ([`record::ext`]): 1 exec path (bytes), 2 integer argument (i64), 3 `MSG_*` flags (u32), 4 batch index and count (u32, u32); unknown types are skipped |
//!
//! An endpoint starts with a tag: 0 none (1 byte); 2 IPv4: address (4 bytes, network order),
//! port u16 (7 bytes); 10 IPv6: address (16 bytes, network order), port u16, scope id u32
//! (23 bytes); 1 UNIX: path length u8 (at most 108), path bytes without the trailing NUL
//! (empty when unnamed, leading NUL when abstract); 255 another family: family u16.
//!
//! A `read` or `write` on a TCP socket is the fixed 28 bytes; a UDP `sendto` with its peer and
//! hash is 43.
//!
//! ## What each call records
//!
//! | call | fd | ret | optional fields |
//! |---|---|---|---|
//! | `socket` | the new one (-1 on failure) | new fd | socket kind |
//! | `socketpair` | first | 0 | socket kind, second fd |
//! | `connect` | socket | 0, or -1 with `EINPROGRESS` | peer (the argument), local (`getsockname`), socket kind; peer pid for UNIX streams |
//! | `accept`, `accept4` | listening socket | new fd | local and peer of the new socket (also when the caller passed NULL), socket kind, second fd; peer pid for UNIX; flags as argument for `accept4` |
//! | `bind` | socket | 0 | local (the name the kernel assigned on success, else the argument) |
//! | `listen` | socket | 0 | local (shows the port of a socket that was never bound), backlog as argument |
//! | `close`, `close_range`, `closefrom` | socket | 0 | (only for known sockets; one record per socket) |
//! | `shutdown` | socket | 0 | `how` as argument |
//! | send family | socket | bytes | datagrams: hash, peer when the call names one, local on the first send of a socket whose name was not logged yet; `MSG_*` flags when unusual; `sendfile`'s input fd as argument |
//! | recv family | socket | bytes (0 at end of stream) | datagrams: hash, peer (the sender, even when the caller did not ask, except for `read`/`readv`/`recvmmsg`); `MSG_*` flags when unusual (`MSG_PEEK`) |
//! | `sendmmsg`, `recvmmsg` | socket | bytes of one message | one record per message, with the batch extension |
//! | dups | old fd | new fd | second fd; flags or minimum as argument (logged when the old descriptor or the one replaced is a known socket: a dup over a socket closes it) |
//! | `fork`, `vfork` | -1 | child pid (in the parent's log), 0 (first record of the child's) | |
//! | exec family | -1 | 0 when attempted; a second record with -1 and errno if it returned | path; `fexecve`'s fd as argument |
//! | end of log | -1 | 0 | `_exit` status as argument when known |
//!
//! Send, recv and accept calls that fail with `EAGAIN` are not logged (nothing happened); other
//! failures are, with errno. `MSG_*` flags are kept when any other than `MSG_NOSIGNAL`,
//! `MSG_DONTWAIT`, `MSG_WAITALL` and `MSG_CMSG_CLOEXEC` were given.

#![deny(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod dir;
pub mod endpoint;
pub mod error;
pub mod hash;
pub mod header;
pub mod reader;
pub mod record;
pub mod spill;
pub mod syscall;
pub mod writer;

pub use dir::{LogFile, LogName, read_dir};
pub use endpoint::{Endpoint, SocketKind};
pub use error::{EncodeError, LogError, WireError, WireErrorKind};
pub use hash::{PayloadHasher, payload_hash};
pub use header::{LogHeader, Origin};
pub use reader::{Follow, Reader, open, open_following};
pub use record::{Batch, Record, RecordView};
pub use syscall::{Call, Direction, Syscall};
pub use writer::Writer;

/// The environment variable that names the capture directory; without it the preload
/// library does nothing.
pub const CAPTURE_DIR_ENV: &str = "CAUSEWAY_CAPTURE_DIR";

/// The process start time (field 22, clock ticks after boot) from the contents of
/// `/proc/PID/stat`.
pub fn proc_start_ticks(stat: &str) -> Option<u64> {
    // Field 2 (the command) is in parentheses and may hold spaces and parentheses itself.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn start_ticks() {
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(super::proc_start_ticks(stat), Some(98765));
        assert_eq!(super::proc_start_ticks("garbage"), None);
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(super::proc_start_ticks(&own).is_some());
    }
}
