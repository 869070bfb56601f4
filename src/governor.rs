//! The memory governor (`--memory-limit`): a thread that watches the process's resident set
//! and, as it nears the limit, lowers the cap on how much event time the stages hold back
//! ([`causeway_sources::shed`]), so that they decide their oldest undecided state early and
//! free it, rather than the process being killed.
//!
//! Every 20 ms it reads `VmRSS` from `/proc/self/status`. At each reading above a quarter of
//! the limit it halves the cap (the first time from 250 ms; above half the limit it quarters
//! it), down to 5 ms: a dense input fills memory within a fraction of a second, and what the
//! stages have taken in before the cut is still worked through after it, so the cut comes
//! early and fast. Below an eighth of the limit for two seconds it doubles the cap again,
//! and lifts it past eight seconds. Under pressure the sources also keep fewer records in
//! flight (`causeway_sources::operator`). The limit is a target, not a guarantee: what is
//! held at the 5 ms floor (the pattern table, learned delays, records in flight) is not
//! shed, and the report at the end gives the peak against the limit. The first cut is reported on stderr at once, what was shed at the
//! end ([`Governor::finish`]). State: none beyond the thread; cost: one small file read per
//! reading.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use causeway_sources::shed::{self, NO_CAP};

const EVERY: Duration = Duration::from_millis(20);
const FIRST_CAP_NS: u64 = 250_000_000;
const FLOOR_NS: u64 = 5_000_000;
const LIFT_NS: u64 = 8_000_000_000;

/// The running governor.
pub struct Governor {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    limit: u64,
}

impl Governor {
    /// Starts watching against `limit` bytes; `None` where the resident set cannot be read
    /// (not Linux), which is said once.
    pub fn start(limit: u64) -> Option<Governor> {
        if resident_bytes().is_none() {
            tracing::warn!("--memory-limit: the resident set cannot be read here; not enforced");
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("causeway-governor".into())
            .spawn(move || watch(limit, &flag))
            .ok()?;
        Some(Governor {
            stop,
            thread: Some(thread),
            limit,
        })
    }

    /// Stops the thread and reports on stderr what was shed, if anything.
    pub fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let shed = shed::report();
        let Some(lowest) = shed.lowest_cap_ns else {
            return;
        };
        let counts: Vec<String> = shed
            .counts
            .iter()
            .map(|(s, n)| format!("{n} {}", s.what()))
            .collect();
        let peak = status_bytes("VmHWM:").unwrap_or(0);
        eprintln!(
            "causeway: memory: peak {} against --memory-limit {}{}; shed (hold-back cut to {} \
             at the lowest): {}",
            size(peak),
            size(self.limit),
            if peak > self.limit { ", over it" } else { "" },
            duration(lowest),
            if counts.is_empty() {
                "nothing decided early".to_owned()
            } else {
                counts.join(", ")
            }
        );
    }
}

impl Drop for Governor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The governor's loop; see the module documentation.
fn watch(limit: u64, stop: &AtomicBool) {
    let (high, urgent, low) = (limit / 4, limit / 2, limit / 8);
    let mut calm_since: Option<Instant> = None;
    let mut warned = false;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(EVERY);
        let Some(rss) = resident_bytes() else { return };
        let cap = shed::cap();
        let now = Instant::now();
        if rss > high {
            let next = match cap {
                NO_CAP => FIRST_CAP_NS,
                _ if rss > urgent => (cap / 4).max(FLOOR_NS),
                _ => (cap / 2).max(FLOOR_NS),
            };
            if next < cap {
                shed::set_cap(next);
                if !warned {
                    warned = true;
                    eprintln!(
                        "causeway: memory: {} of --memory-limit {} in use: shedding, each stage \
                         holds back at most {} of event time (what is decided early is counted \
                         and reported at the end)",
                        size(rss),
                        size(limit),
                        duration(next)
                    );
                }
            }
            calm_since = None;
        } else if rss < low && cap != NO_CAP {
            let since = *calm_since.get_or_insert(now);
            if now.duration_since(since) >= Duration::from_secs(2) {
                let next = cap.saturating_mul(2);
                shed::set_cap(if next > LIFT_NS { NO_CAP } else { next });
                calm_since = Some(now);
            }
        } else {
            calm_since = None;
        }
    }
}

/// The process's resident set in bytes (`VmRSS`), on Linux.
pub fn resident_bytes() -> Option<u64> {
    status_bytes("VmRSS:")
}

/// A size field of `/proc/self/status` (`VmRSS:`, `VmHWM:`), in bytes.
fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line
        .trim_start_matches(field)
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The default limit: three quarters of the memory this process may use (the machine's, or
/// its cgroup's limit when lower); `None` when neither can be read.
pub fn default_limit() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let total_kib: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .trim_start_matches("MemTotal:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let mut total = total_kib * 1024;
    if let Some(max) = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
    {
        total = total.min(max);
    }
    Some(total / 4 * 3)
}

fn size(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / (1 << 20) as f64)
}

fn duration(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.1} s", ns as f64 / 1e9)
    } else {
        format!("{} ms", ns / 1_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_resident_set_and_a_default_limit() {
        let rss = resident_bytes().expect("VmRSS");
        assert!(rss > 1 << 20, "{rss}");
        let limit = default_limit().expect("MemTotal");
        assert!(limit > rss, "{limit} {rss}");
    }

    #[test]
    fn formats() {
        assert_eq!(size(256 << 20), "256 MiB");
        assert_eq!(duration(1_500_000_000), "1.5 s");
        assert_eq!(duration(8_000_000), "8 ms");
    }
}
