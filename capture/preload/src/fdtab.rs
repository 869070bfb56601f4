//! Which descriptors are sockets: a fixed table of atomic bytes indexed by descriptor, so that
//! a `read` or `write` on anything else costs one relaxed load.
//!
//! An entry is 0 for "not a known socket"; otherwise [`SOCK`] is set and the low bits keep the
//! socket type and family, so that most calls need no `getsockopt` to know them. Descriptors
//! at or above [`SIZE`] are not in the table; callers check them with `fstat`.

use std::sync::atomic::{AtomicU8, Ordering};

/// Descriptors the table covers.
pub const SIZE: usize = 65536;

/// Set in every socket entry.
pub const SOCK: u8 = 0x80;
/// Set once the local name of a datagram socket has been logged.
pub const LOCAL_LOGGED: u8 = 0x40;
const TYPE_MASK: u8 = 0x07;
const FAMILY_MASK: u8 = 0x38;
const FAMILY_SHIFT: u8 = 3;

static TABLE: [AtomicU8; SIZE] = [const { AtomicU8::new(0) }; SIZE];

fn slot(fd: i32) -> Option<&'static AtomicU8> {
    usize::try_from(fd).ok().and_then(|i| TABLE.get(i))
}

/// The entry of `fd` (0 when unknown or outside the table).
#[inline(always)]
pub fn get(fd: i32) -> u8 {
    match slot(fd) {
        Some(s) => s.load(Ordering::Relaxed),
        None => 0,
    }
}

/// Sets the entry of `fd` (no effect outside the table).
pub fn set(fd: i32, entry: u8) {
    if let Some(s) = slot(fd) {
        s.store(entry, Ordering::Relaxed);
    }
}

/// Clears the entry of `fd` if it is set (no store, so no cache-line traffic, otherwise).
#[inline]
pub fn clear(fd: i32) {
    if let Some(s) = slot(fd) {
        if s.load(Ordering::Relaxed) != 0 {
            s.store(0, Ordering::Relaxed);
        }
    }
}

/// Sets bits in the entry of `fd`.
pub fn add(fd: i32, bits: u8) {
    if let Some(s) = slot(fd) {
        s.fetch_or(bits, Ordering::Relaxed);
    }
}

/// The entry for a socket of this family (`AF_*`) and type (`SOCK_*`, flags ignored).
pub fn entry(family: i32, sock_type: i32) -> u8 {
    let fam = match family {
        libc::AF_UNIX => 1,
        libc::AF_INET => 2,
        libc::AF_INET6 => 3,
        libc::AF_NETLINK => 4,
        libc::AF_PACKET => 5,
        _ => 0,
    };
    SOCK | (fam << FAMILY_SHIFT) | ((sock_type & 0x0f) as u8 & TYPE_MASK)
}

/// The `AF_*` family an entry keeps (0 when unknown).
pub fn family(entry: u8) -> u16 {
    match (entry & FAMILY_MASK) >> FAMILY_SHIFT {
        1 => libc::AF_UNIX as u16,
        2 => libc::AF_INET as u16,
        3 => libc::AF_INET6 as u16,
        4 => libc::AF_NETLINK as u16,
        5 => libc::AF_PACKET as u16,
        _ => 0,
    }
}

/// The `SOCK_*` type an entry keeps.
pub fn sock_type(entry: u8) -> u16 {
    u16::from(entry & TYPE_MASK)
}

/// A datagram socket.
pub fn is_dgram(entry: u8) -> bool {
    entry & TYPE_MASK == libc::SOCK_DGRAM as u8
}

/// A UNIX-domain socket.
pub fn is_unix(entry: u8) -> bool {
    (entry & FAMILY_MASK) >> FAMILY_SHIFT == 1
}

/// Calls `f` for every descriptor in `first..=last` (clipped to the table) with an entry.
pub fn for_each_in(first: u32, last: u32, mut f: impl FnMut(i32, u8)) {
    let end = (last as usize).min(SIZE - 1);
    let mut fd = first as usize;
    while fd <= end {
        let e = TABLE[fd].load(Ordering::Relaxed);
        if e != 0 {
            f(fd as i32, e);
        }
        fd += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries() {
        let e = entry(libc::AF_INET6, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC);
        assert_eq!(family(e), 10);
        assert_eq!(sock_type(e), 2);
        assert!(is_dgram(e) && !is_unix(e));
        set(70_000, e);
        assert_eq!(get(70_000), 0);
        set(-1, e);
        set(100, e);
        add(100, LOCAL_LOGGED);
        assert_eq!(get(100), e | LOCAL_LOGGED);
        let mut seen = Vec::new();
        for_each_in(90, 200, |fd, _| seen.push(fd));
        assert_eq!(seen, [100]);
        clear(100);
        assert_eq!(get(100), 0);
    }
}
