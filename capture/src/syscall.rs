//! What a record is about: the exact libc entry point ([`Syscall`]), its family ([`Call`]) and,
//! for calls that move bytes, their [`Direction`].

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which way a call moves payload bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Direction {
    /// The process hands bytes to the socket (send family).
    Send,
    /// The process takes bytes from the socket (recv family).
    Recv,
}

/// The family of a call: what a consumer usually needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Call {
    /// `socket`.
    Socket,
    /// `socketpair`.
    Socketpair,
    /// `connect`.
    Connect,
    /// `accept`, `accept4`.
    Accept,
    /// `bind`.
    Bind,
    /// `listen`.
    Listen,
    /// `close`, and each known socket closed by `close_range` / `closefrom`.
    Close,
    /// `shutdown`.
    Shutdown,
    /// Send family: `send`, `sendto`, `sendmsg`, `sendmmsg`, `write`, `writev`, `sendfile`.
    Send,
    /// Recv family: `recv`, `recvfrom`, `recvmsg`, `recvmmsg`, `read`, `readv`.
    Recv,
    /// Descriptor duplication: `dup`, `dup2`, `dup3`, `fcntl(F_DUPFD*)`.
    Dup,
    /// `fork`, `vfork` (and forks the library only sees through `pthread_atfork`).
    Fork,
    /// The exec family.
    Exec,
    /// Not a call: the writer's end-of-log marker, written at process exit.
    End,
}

impl Call {
    /// Which way the call moves payload bytes, if it does.
    pub fn direction(self) -> Option<Direction> {
        match self {
            Call::Send => Some(Direction::Send),
            Call::Recv => Some(Direction::Recv),
            _ => None,
        }
    }
}

macro_rules! syscalls {
    ($( $(#[$doc:meta])* $variant:ident = $code:literal, $name:literal, $call:ident; )*) => {
        /// The exact entry point a record comes from, with its one-byte code in the log.
        ///
        /// Codes are stable: a code is never reused for another entry point.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[repr(u8)]
        pub enum Syscall {
            $( $(#[$doc])* $variant = $code, )*
        }

        impl Syscall {
            /// Every entry point, in code order.
            pub const ALL: &'static [Syscall] = &[$(Syscall::$variant),*];

            /// The entry point with this code, if there is one.
            pub fn from_code(code: u8) -> Option<Syscall> {
                match code {
                    $( $code => Some(Syscall::$variant), )*
                    _ => None,
                }
            }

            /// The one-byte code in the log.
            pub fn code(self) -> u8 {
                self as u8
            }

            /// The libc name (`"end-of-log"` for [`Syscall::End`]).
            pub fn name(self) -> &'static str {
                match self {
                    $( Syscall::$variant => $name, )*
                }
            }

            /// The call's family.
            pub fn call(self) -> Call {
                match self {
                    $( Syscall::$variant => Call::$call, )*
                }
            }
        }
    };
}

syscalls! {
    /// `socket(2)`.
    Socket = 1, "socket", Socket;
    /// `socketpair(2)`.
    Socketpair = 2, "socketpair", Socketpair;
    /// `connect(2)`.
    Connect = 3, "connect", Connect;
    /// `accept(2)`.
    Accept = 4, "accept", Accept;
    /// `accept4(2)`.
    Accept4 = 5, "accept4", Accept;
    /// `bind(2)`.
    Bind = 6, "bind", Bind;
    /// `listen(2)`.
    Listen = 7, "listen", Listen;
    /// `close(2)`.
    Close = 8, "close", Close;
    /// `shutdown(2)`.
    Shutdown = 9, "shutdown", Shutdown;
    /// `close_range(2)`: one record per known socket it closed.
    CloseRange = 10, "close_range", Close;
    /// `closefrom(3)`: one record per known socket it closed.
    Closefrom = 11, "closefrom", Close;
    /// `send(2)`.
    Send = 16, "send", Send;
    /// `sendto(2)`.
    Sendto = 17, "sendto", Send;
    /// `sendmsg(2)`.
    Sendmsg = 18, "sendmsg", Send;
    /// `sendmmsg(2)`: one record per message sent.
    Sendmmsg = 19, "sendmmsg", Send;
    /// `write(2)` on a socket.
    Write = 20, "write", Send;
    /// `writev(2)` on a socket.
    Writev = 21, "writev", Send;
    /// `sendfile(2)` (and `sendfile64`) to a socket.
    Sendfile = 22, "sendfile", Send;
    /// `recv(2)` (and `__recv_chk`).
    Recv = 32, "recv", Recv;
    /// `recvfrom(2)` (and `__recvfrom_chk`).
    Recvfrom = 33, "recvfrom", Recv;
    /// `recvmsg(2)`.
    Recvmsg = 34, "recvmsg", Recv;
    /// `recvmmsg(2)`: one record per message received.
    Recvmmsg = 35, "recvmmsg", Recv;
    /// `read(2)` on a socket (and `__read_chk`).
    Read = 36, "read", Recv;
    /// `readv(2)` on a socket.
    Readv = 37, "readv", Recv;
    /// `dup(2)`.
    Dup = 48, "dup", Dup;
    /// `dup2(2)`.
    Dup2 = 49, "dup2", Dup;
    /// `dup3(2)`.
    Dup3 = 50, "dup3", Dup;
    /// `fcntl(fd, F_DUPFD, min)`.
    FcntlDupfd = 51, "fcntl(F_DUPFD)", Dup;
    /// `fcntl(fd, F_DUPFD_CLOEXEC, min)`.
    FcntlDupfdCloexec = 52, "fcntl(F_DUPFD_CLOEXEC)", Dup;
    /// `fork(2)`, or a fork seen only through `pthread_atfork` (for example inside `daemon(3)`).
    Fork = 64, "fork", Fork;
    /// `vfork(2)` (the library runs it as a `fork`).
    Vfork = 65, "vfork", Fork;
    /// `execve(2)`.
    Execve = 72, "execve", Exec;
    /// `execv(3)`.
    Execv = 73, "execv", Exec;
    /// `execvp(3)`.
    Execvp = 74, "execvp", Exec;
    /// `execvpe(3)`.
    Execvpe = 75, "execvpe", Exec;
    /// `execveat(2)`.
    Execveat = 76, "execveat", Exec;
    /// `fexecve(3)`.
    Fexecve = 77, "fexecve", Exec;
    /// The end-of-log marker: the process exited (through `exit`, `_exit` or `_Exit`).
    End = 255, "end-of-log", End;
}

impl Syscall {
    /// Which way the call moves payload bytes, if it does (send vs recv family).
    pub fn direction(self) -> Option<Direction> {
        self.call().direction()
    }
}

impl fmt::Display for Syscall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for &s in Syscall::ALL {
            assert_eq!(Syscall::from_code(s.code()), Some(s));
            assert!(seen.insert(s.code()));
        }
        assert_eq!(Syscall::from_code(0), None);
        assert_eq!(Syscall::from_code(200), None);
    }

    #[test]
    fn directions() {
        assert_eq!(Syscall::Write.direction(), Some(Direction::Send));
        assert_eq!(Syscall::Readv.direction(), Some(Direction::Recv));
        assert_eq!(Syscall::Accept4.direction(), None);
        assert_eq!(Syscall::Accept4.call(), Call::Accept);
        assert_eq!(Syscall::Write.name(), "write");
    }
}
