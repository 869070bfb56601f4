//! Origins: where observations come from, and which clock they carry.
//!
//! Every observation carries an [`OriginId`], a small index into the run's [`Origins`] table.
//! An origin is a sniffer (a pcap file named `NAME=PATH`, or after the file's stem) or a trace
//! file; it is also the clock domain of the timestamps it records. Several files may share one
//! origin (a sniffer that rotated its output with `tcpdump -C`).

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::clocks::HostKey;
use crate::observation::Address;

/// Index of an origin in the run's [`Origins`] table.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct OriginId(pub u16);

/// What an origin is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The name users see: the sniffer's name, or the file's stem.
    pub name: String,
}

/// The table of origins of one run; identical on every worker and process, since it is built
/// from the command line alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origins {
    origins: Vec<Origin>,
}

impl Origins {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The id for `name`, adding it if it is new.
    pub fn intern(&mut self, name: &str) -> OriginId {
        if let Some(i) = self.origins.iter().position(|o| o.name == name) {
            return OriginId(i as u16);
        }
        self.origins.push(Origin {
            name: name.to_owned(),
        });
        OriginId((self.origins.len() - 1) as u16)
    }

    /// The name of `id`, or `origin#N` for an id this table does not hold.
    pub fn name(&self, id: OriginId) -> String {
        match self.origins.get(id.0 as usize) {
            Some(o) => o.name.clone(),
            None => format!("origin#{}", id.0),
        }
    }

    /// Number of origins.
    pub fn len(&self) -> usize {
        self.origins.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.origins.is_empty()
    }

    /// All origins with their ids.
    pub fn iter(&self) -> impl Iterator<Item = (OriginId, &Origin)> {
        self.origins
            .iter()
            .enumerate()
            .map(|(i, o)| (OriginId(i as u16), o))
    }
}

/// Coarse alignment of the origins' clocks: how far each origin's clock is ahead of the
/// reference clock, as estimated before the dataflow starts. Timely time (event time) is a
/// record's raw time minus its origin's offset, so that sniffers whose clocks differ by an
/// hour still meet in the same windows; the `clock` operator refines the offsets (and drift)
/// continuously for the timestamps it corrects.
///
/// A message trace's timestamps are each in the clock of the host that took them, so a trace
/// has no offset of its own: its hosts have theirs ([`HostKey`]: an endpoint's IP, or a
/// named address), and its reader aligns each row by the host that stamped its event time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Alignment {
    offsets: Vec<i64>,
    hosts: HashMap<HostKey, i64>,
    /// Hard bounds on the error of `hosts`' offsets (ns), where the bootstrap has one.
    host_bounds: HashMap<HostKey, u64>,
    /// The least of `host_bounds`.
    least_host_bound: Option<u64>,
}

impl Alignment {
    /// No offsets: every clock is taken as the reference.
    pub fn none() -> Self {
        Self::default()
    }

    /// Sets `origin`'s offset (its clock minus the reference clock, ns).
    pub fn set(&mut self, origin: OriginId, offset_ns: i64) {
        let i = origin.0 as usize;
        if self.offsets.len() <= i {
            self.offsets.resize(i + 1, 0);
        }
        self.offsets[i] = offset_ns;
    }

    /// `origin`'s offset in ns (0 when unknown).
    #[inline]
    pub fn offset(&self, origin: OriginId) -> i64 {
        self.offsets.get(origin.0 as usize).copied().unwrap_or(0)
    }

    /// A raw time of `origin` in the reference clock.
    #[inline]
    pub fn align(&self, origin: OriginId, raw: u64) -> u64 {
        raw.saturating_add_signed(-self.offset(origin))
    }

    /// Sets a message-trace host's offset (its clock minus the reference clock, ns).
    pub fn set_host(&mut self, host: HostKey, offset_ns: i64) {
        self.hosts.insert(host, offset_ns);
    }

    /// Sets a hard bound on the error of a message-trace host's offset (ns): its clock minus
    /// the reference clock is within that much of the offset, when the offset was estimated
    /// (the bootstrap's first seconds; a clock drifts away from it after).
    pub fn set_host_bound(&mut self, host: HostKey, bound_ns: u64) {
        self.host_bounds.insert(host, bound_ns);
        self.least_host_bound = Some(self.least_host_bound.map_or(bound_ns, |b| b.min(bound_ns)));
    }

    /// The least bound any host's offset has (`None`: none has one): an estimate known
    /// better than that needs no host looked up.
    #[inline]
    pub fn least_host_bound(&self) -> Option<u64> {
        self.least_host_bound
    }

    /// The bound on the error of the offset of the host of `address` (ns), if there is one.
    pub fn host_bound(&self, address: &Address) -> Option<u64> {
        if self.host_bounds.is_empty() {
            return None;
        }
        self.host_bounds.get(&HostKey::of(address)).copied()
    }

    /// The offset of the host of `address` (ns), if the bootstrap estimated one.
    pub fn host_offset(&self, address: &Address) -> Option<i64> {
        if self.hosts.is_empty() {
            return None;
        }
        self.hosts.get(&HostKey::of(address)).copied()
    }

    /// The message-trace hosts with an offset, and their offsets.
    pub fn hosts(&self) -> impl Iterator<Item = (&HostKey, i64)> {
        self.hosts.iter().map(|(k, o)| (k, *o))
    }
}

/// The origin name a path gets when the user does not name it: the file name without
/// directories and without the extensions `.gz`, `.pcap`, `.pcapng`, `.cap` and `.csv`.
pub fn default_origin_name(path: &str) -> String {
    if path == "-" {
        return "stdin".to_owned();
    }
    let mut name = Path::new(path)
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_owned());
    for ext in [".gz", ".pcapng", ".pcap", ".cap", ".csv"] {
        if let Some(stripped) = name.strip_suffix(ext) {
            if !stripped.is_empty() {
                name = stripped.to_owned();
            }
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_strip_directories_and_capture_extensions() {
        assert_eq!(default_origin_name("/tmp/x/web1.pcap"), "web1");
        assert_eq!(default_origin_name("db.pcapng.gz"), "db");
        assert_eq!(default_origin_name("trace.csv"), "trace");
        assert_eq!(default_origin_name("-"), "stdin");
        assert_eq!(default_origin_name(".pcap"), ".pcap");
    }

    #[test]
    fn interning_is_stable() {
        let mut o = Origins::new();
        let a = o.intern("a");
        let b = o.intern("b");
        assert_eq!(o.intern("a"), a);
        assert_ne!(a, b);
        assert_eq!(o.name(b), "b");
        assert_eq!(o.len(), 2);
    }
}
