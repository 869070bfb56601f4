//! Progress on stderr while inputs are read: an indicatif bar when stderr is a terminal, or a
//! plain line every few seconds (for logs) when asked for with `--progress always`.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use causeway_sources::ProgressCounter;

/// Reports progress until dropped.
pub struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// Follows `counter` (bytes consumed from the input files) against `total` bytes (unknown
    /// when reading stdin).
    pub fn start(counter: ProgressCounter, total: Option<u64>) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = if std::io::stderr().is_terminal() {
            std::thread::spawn(move || bar(&counter, total, &flag))
        } else {
            std::thread::spawn(move || lines(&counter, total, &flag))
        };
        Progress {
            stop,
            thread: Some(thread),
        }
    }
}

fn bar(counter: &ProgressCounter, total: Option<u64>, stop: &AtomicBool) {
    let (bar, template) = match total {
        Some(t) => (
            indicatif::ProgressBar::new(t),
            "{spinner} reading {bytes}/{total_bytes} [{wide_bar}] {bytes_per_sec}, {eta} left",
        ),
        None => (
            indicatif::ProgressBar::new_spinner(),
            "{spinner} reading {bytes} {bytes_per_sec}",
        ),
    };
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    while !stop.load(Ordering::Relaxed) {
        bar.set_position(counter.load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_millis(100));
    }
    bar.finish_and_clear();
}

fn lines(counter: &ProgressCounter, total: Option<u64>, stop: &AtomicBool) {
    let start = Instant::now();
    let mut next = Duration::from_secs(5);
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        let elapsed = start.elapsed();
        if elapsed < next {
            continue;
        }
        next += Duration::from_secs(5);
        let done = counter.load(Ordering::Relaxed);
        let rate = done as f64 / elapsed.as_secs_f64() / 1e6;
        match total {
            Some(t) if t > 0 => eprintln!(
                "causeway: reading {:.1} of {:.1} MB ({:.0}%), {rate:.0} MB/s",
                done as f64 / 1e6,
                t as f64 / 1e6,
                100.0 * done as f64 / t as f64
            ),
            _ => eprintln!(
                "causeway: reading {:.1} MB, {rate:.0} MB/s",
                done as f64 / 1e6
            ),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
