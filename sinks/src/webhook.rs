//! The webhook sink (`--sink webhook:URL`): every `alert` record HTTP-POSTed as JSON to a URL,
//! through an on-disk queue, so that alerts outlive a receiver that is down and a restart.
//!
//! - **Input**: `alert` records; other kinds are ignored. Each alert is sent as the object the
//!   jsonl sink writes (`Content-Type: application/json`), plus a field `alert_id`
//!   (`<run id>-<n>`, unique and stable across retries and restarts), which is also sent as the
//!   `Idempotency-Key` header so that a receiver can drop the duplicates that at-least-once
//!   delivery can give (a receiver that took an alert but whose answer was lost gets it again).
//! - **Output**: one POST per alert, in order, from a background thread: the dataflow never
//!   waits on the network, only on writing the alert's file. A 2xx answer delivers it. 4xx
//!   other than 408 and 429 rejects it for good (counted as `rejected`, the first one logged).
//!   Anything else (no connection, a timeout, 408, 429, 5xx, 3xx: redirects are not followed)
//!   is retried after an exponential backoff with jitter ([`Backoff`], 100 ms doubling to
//!   10 s; `Retry-After` in seconds is honoured up to the same cap). Plain `http://` only.
//! - **State**: the queue ([`queue::DiskQueue`]): one file per undelivered alert in the queue
//!   directory (`--webhook-queue`, default `$XDG_STATE_HOME/causeway/webhook/<receiver>`),
//!   bounded by entries and bytes; when it is full the newest alert is dropped and counted.
//!   An alert's file is written before any attempt and deleted on a 2xx or a rejection, so
//!   the state is freed as the receiver takes alerts. Alerts left by an earlier run are sent
//!   first.
//! - **End**: [`Sink::finish`] keeps delivering for at most the drain time (`--webhook-drain`,
//!   10 s), then writes one line on stderr: delivered / retried (failed attempts) / pending
//!   (left in the queue for the next run) / dropped / rejected. Every alert is delivered, left
//!   on disk, or counted.
//! - **Cost**: per alert, a JSON encoding and a small file written and renamed on the
//!   dataflow's thread (no fsync: the queue survives the process, not a power cut); the POST
//!   and the file's deletion on the delivery thread.

pub mod queue;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use causeway_sources::Origins;
use serde_json::Value;

use crate::{Record, Sink, SinkError};
use queue::{DiskQueue, Entry};

/// Settings shared by every webhook sink of a run.
#[derive(Clone, Debug)]
pub struct WebhookOptions {
    /// The directory under which each receiver's queue lives (`None`: the default,
    /// [`default_queue_base`]).
    pub queue_base: Option<PathBuf>,
    /// Most alerts queued.
    pub max_entries: usize,
    /// Most bytes queued.
    pub max_bytes: u64,
    /// Time limit of one request (connect, send, answer).
    pub timeout: Duration,
    /// How long [`Sink::finish`] keeps delivering.
    pub drain: Duration,
    /// Waits between failed attempts.
    pub backoff: Backoff,
}

impl Default for WebhookOptions {
    fn default() -> Self {
        WebhookOptions {
            queue_base: None,
            max_entries: 10_000,
            max_bytes: 64 << 20,
            timeout: Duration::from_secs(5),
            drain: Duration::from_secs(10),
            backoff: Backoff::default(),
        }
    }
}

/// Exponential backoff with "equal jitter": the wait before retry `n` (0-based) is drawn
/// uniformly from `[c/2, c]`, where `c = first * 2^n` capped at `max`. So waits never exceed
/// `max` and are never shorter than `first / 2`, and receivers coming back are not met by
/// every sender at once. (backon's jitter adds up to 100% *above* the capped delay, which
/// would break the cap; this is the whole loop.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The ceiling of the first wait.
    pub first: Duration,
    /// The cap.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            first: Duration::from_millis(100),
            max: Duration::from_secs(10),
        }
    }
}

impl Backoff {
    /// The wait before retry `attempt` (0-based), jittered with `rng`.
    pub fn delay(&self, attempt: u32, rng: &mut fastrand::Rng) -> Duration {
        let ceiling = self
            .first
            .saturating_mul(1u32 << attempt.min(20))
            .min(self.max);
        let half = ceiling / 2;
        let extra = ceiling - half;
        half + extra.mul_f64(rng.f64())
    }
}

/// Where queues live by default: `$XDG_STATE_HOME/causeway/webhook`, else
/// `~/.local/state/causeway/webhook`, else `causeway-webhook` in the system's temp directory.
pub fn default_queue_base() -> PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        });
    match state {
        Some(s) => s.join("causeway").join("webhook"),
        None => std::env::temp_dir().join("causeway-webhook"),
    }
}

/// The queue directory of `url` under `base`: the URL's host, port and path made a file
/// name, and a hash of the whole URL (so that two URLs never share a queue).
pub fn queue_dir(base: &Path, url: &str) -> PathBuf {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let mut name: String = rest
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(60)
        .collect();
    // FNV-1a: stable across Rust versions, unlike std's hasher.
    let hash = url.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    name.push_str(&format!("-{:08x}", hash as u32));
    base.join(name)
}

/// What a run of the webhook sink did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WebhookReport {
    /// Alerts the receiver took (a 2xx), including ones an earlier run queued.
    pub delivered: u64,
    /// Failed attempts that were (or would have been) tried again.
    pub retried: u64,
    /// Alerts left in the queue for the next run.
    pub pending: u64,
    /// Alerts not queued because the queue was full (or could not be written), and queued
    /// files that could not be read back.
    pub dropped: u64,
    /// Alerts the receiver refused for good (4xx other than 408 and 429).
    pub rejected: u64,
    /// Alerts found in the queue at the start, left by an earlier run.
    pub recovered: u64,
}

struct State {
    queue: DiskQueue,
    report: WebhookReport,
    /// Set by `finish`: deliver until then, then stop.
    deadline: Option<Instant>,
    /// Set on drop without `finish`: stop at once.
    stop: bool,
    warned_drop: bool,
    warned_reject: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// POSTs alerts to a URL; see the module documentation.
pub struct Webhook {
    url: String,
    origins: Origins,
    run_id: String,
    seq: u64,
    drain: Duration,
    timeout: Duration,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    report: Option<WebhookReport>,
}

impl Webhook {
    /// Opens the queue of `url` and starts the delivery thread, which at once sends what an
    /// earlier run left in the queue.
    pub fn start(
        url: &str,
        options: &WebhookOptions,
        origins: Origins,
    ) -> Result<Webhook, SinkError> {
        check_url(url).map_err(|e| SinkError::Io {
            target: format!("webhook {url}"),
            source: std::io::Error::other(e),
        })?;
        let base = options
            .queue_base
            .clone()
            .unwrap_or_else(default_queue_base);
        let dir = queue_dir(&base, url);
        let queue =
            DiskQueue::open(&dir, options.max_entries, options.max_bytes).map_err(|source| {
                SinkError::Io {
                    target: format!("webhook queue {}", dir.display()),
                    source,
                }
            })?;
        let recovered = queue.len() as u64;
        if recovered > 0 {
            tracing::info!(
                "webhook {url}: {recovered} alerts left by an earlier run in {}",
                dir.display()
            );
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue,
                report: WebhookReport {
                    recovered,
                    ..WebhookReport::default()
                },
                deadline: None,
                stop: false,
                warned_drop: false,
                warned_reject: false,
            }),
            wake: Condvar::new(),
        });
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(options.timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent(concat!("causeway/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let thread = {
            let shared = Arc::clone(&shared);
            let target = url.to_owned();
            let backoff = options.backoff;
            std::thread::Builder::new()
                .name("webhook".into())
                .spawn(move || deliver(&shared, &agent, &target, backoff))
                .map_err(|source| SinkError::Io {
                    target: format!("webhook {url}"),
                    source,
                })?
        };
        let mut rng = fastrand::Rng::new();
        Ok(Webhook {
            url: url.to_owned(),
            origins,
            run_id: format!("{:012x}", rng.u64(..) >> 16),
            seq: 0,
            drain: options.drain,
            timeout: options.timeout,
            shared,
            thread: Some(thread),
            report: None,
        })
    }

    /// The id prefix of this run's alerts.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The queue directory.
    pub fn queue_dir(&self) -> PathBuf {
        self.shared.lock().queue.dir().to_owned()
    }

    /// The counts so far, or the final ones after [`Sink::finish`].
    pub fn report(&self) -> WebhookReport {
        if let Some(r) = self.report {
            return r;
        }
        let st = self.shared.lock();
        WebhookReport {
            pending: st.queue.len() as u64,
            ..st.report
        }
    }

    /// Stops the delivery thread: at `deadline`, or at once.
    fn stop(&mut self, deadline: Option<Instant>) {
        {
            let mut st = self.shared.lock();
            match deadline {
                Some(d) => st.deadline = Some(d),
                None => st.stop = true,
            }
        }
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Checks that `url` is a plain-HTTP URL with a host.
fn check_url(url: &str) -> Result<(), String> {
    if url.starts_with("https://") {
        return Err("https is not supported by this build (plain http:// only; put a TLS-terminating proxy in front of the receiver)".into());
    }
    if !url.starts_with("http://") {
        return Err("expected an http:// URL".into());
    }
    let uri: ureq::http::Uri = url.parse().map_err(|e| format!("not a URL: {e}"))?;
    match uri.host() {
        Some(h) if !h.is_empty() => Ok(()),
        _ => Err("the URL has no host".into()),
    }
}

impl Sink for Webhook {
    fn write(&mut self, record: &Record) -> Result<(), SinkError> {
        if !matches!(record, Record::Alert(_)) || self.report.is_some() {
            return Ok(());
        }
        self.seq += 1;
        let id = format!("{}-{}", self.run_id, self.seq);
        let mut v = record.to_json(&self.origins);
        if let Value::Object(o) = &mut v {
            o.insert("alert_id".into(), Value::String(id.clone()));
        }
        let body = serde_json::to_vec(&v).map_err(|e| SinkError::Encode(e.to_string()))?;
        let mut st = self.shared.lock();
        let problem = match st.queue.push(&id, &body) {
            Ok(true) => None,
            Ok(false) => Some(format!(
                "the queue is full ({} alerts, {} bytes)",
                st.queue.len(),
                st.queue.bytes()
            )),
            Err(e) => Some(format!("cannot write to the queue: {e}")),
        };
        match problem {
            None => {
                drop(st);
                self.shared.wake.notify_all();
            }
            Some(why) => {
                st.report.dropped += 1;
                if !st.warned_drop {
                    st.warned_drop = true;
                    tracing::warn!(
                        "webhook {}: {why} in {}: dropping new alerts (counted)",
                        self.url,
                        st.queue.dir().display()
                    );
                }
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        if self.report.is_some() {
            return Ok(());
        }
        let start = Instant::now();
        self.stop(Some(start + self.drain));
        let report = self.report();
        self.report = Some(report);
        let st = self.shared.lock();
        let waited = start.elapsed();
        let mut line = format!(
            "causeway: webhook {}: delivered {}, retried {}, pending {}, dropped {}, rejected {}",
            self.url,
            report.delivered,
            report.retried,
            report.pending,
            report.dropped,
            report.rejected
        );
        if report.pending > 0 {
            line.push_str(&format!(
                " (pending left in {} for the next run; drained for {:.1} s, request timeout {:?})",
                st.queue.dir().display(),
                waited.as_secs_f64(),
                self.timeout
            ));
        }
        eprintln!("{line}");
        Ok(())
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        // Without `finish` (a failed run): stop at once; the queue keeps what is owed.
        self.stop(None);
    }
}

/// What one attempt gave.
enum Outcome {
    Delivered,
    Rejected(u16),
    Retry(String, Option<Duration>),
    Unreadable(std::io::Error),
}

/// One POST of a queued alert.
fn attempt(agent: &ureq::Agent, url: &str, entry: &Entry) -> Outcome {
    let body = match std::fs::read(&entry.path) {
        Ok(b) => b,
        Err(e) => return Outcome::Unreadable(e),
    };
    let sent = agent
        .post(url)
        .header("Content-Type", "application/json")
        .header("Idempotency-Key", &entry.id)
        .send(&body[..]);
    match sent {
        Ok(mut response) => {
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|s| s.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            // Read the (small) answer so the connection can be used again.
            let _ = response
                .body_mut()
                .with_config()
                .limit(64 << 10)
                .read_to_vec();
            match status {
                200..=299 => Outcome::Delivered,
                408 | 429 => Outcome::Retry(format!("HTTP {status}"), retry_after),
                400..=499 => Outcome::Rejected(status),
                _ => Outcome::Retry(format!("HTTP {status}"), retry_after),
            }
        }
        Err(e) => Outcome::Retry(e.to_string(), None),
    }
}

/// The delivery thread: sends the queue's oldest alert until the queue is empty and the
/// sink finishes, or the deadline passes.
fn deliver(shared: &Shared, agent: &ureq::Agent, url: &str, backoff: Backoff) {
    let mut rng = fastrand::Rng::new();
    let mut failures = 0u32;
    loop {
        let entry = {
            let mut st = shared.lock();
            loop {
                if st.stop {
                    return;
                }
                if st
                    .deadline
                    .is_some_and(|d| st.queue.is_empty() || Instant::now() >= d)
                {
                    return;
                }
                if let Some(e) = st.queue.front() {
                    break e.clone();
                }
                st = shared.wake.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
        };
        let outcome = attempt(agent, url, &entry);
        let mut st = shared.lock();
        let wait = match outcome {
            Outcome::Delivered => {
                st.report.delivered += 1;
                None
            }
            Outcome::Rejected(status) => {
                st.report.rejected += 1;
                if !st.warned_reject {
                    st.warned_reject = true;
                    tracing::warn!(
                        "webhook {url}: alert {} rejected with HTTP {status} (not retried; counted)",
                        entry.id
                    );
                }
                None
            }
            Outcome::Unreadable(e) => {
                st.report.dropped += 1;
                tracing::warn!(
                    "webhook {url}: cannot read {}: {e} (dropped; counted)",
                    entry.path.display()
                );
                None
            }
            Outcome::Retry(why, after) => {
                st.report.retried += 1;
                if failures == 0 {
                    tracing::info!("webhook {url}: {why}; retrying with backoff");
                }
                let wait = backoff.delay(failures, &mut rng);
                failures = failures.saturating_add(1);
                Some(after.map_or(wait, |a| a.min(backoff.max)))
            }
        };
        let Some(wait) = wait else {
            failures = 0;
            if let Err(e) = st.queue.pop_front() {
                tracing::warn!("webhook {url}: cannot remove {}: {e}", entry.path.display());
            }
            continue;
        };
        let until = Instant::now() + wait;
        loop {
            let now = Instant::now();
            let end = st.deadline.map_or(until, |d| d.min(until));
            if st.stop || now >= end {
                break;
            }
            st = shared
                .wake
                .wait_timeout(st, end - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_bounds_and_caps() {
        let b = Backoff::default();
        let mut rng = fastrand::Rng::with_seed(7);
        for attempt in 0..40 {
            let ceiling = (Duration::from_millis(100) * 2u32.pow(attempt.min(20))).min(b.max);
            for _ in 0..200 {
                let d = b.delay(attempt, &mut rng);
                assert!(d >= ceiling / 2 && d <= ceiling, "{attempt}: {d:?}");
            }
        }
        // Jittered: not always the same.
        let waits: std::collections::BTreeSet<Duration> =
            (0..50).map(|_| b.delay(3, &mut rng)).collect();
        assert!(waits.len() > 40);
        // Reaches the cap after log2(10 s / 100 ms) < 7 doublings.
        assert!(b.delay(7, &mut rng) >= Duration::from_secs(5));
    }

    #[test]
    fn queue_dirs_name_the_receiver_and_differ_per_url() {
        let base = Path::new("/q");
        let a = queue_dir(base, "http://127.0.0.1:9000/alerts");
        let b = queue_dir(base, "http://127.0.0.1:9000/alerts?x");
        assert!(a.starts_with(base));
        let name = a.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("127.0.0.1_9000_alerts-"), "{name}");
        assert_ne!(a, b);
        assert_eq!(a, queue_dir(base, "http://127.0.0.1:9000/alerts"));
    }

    #[test]
    fn only_plain_http_urls() {
        assert!(check_url("http://127.0.0.1:9000/a").is_ok());
        assert!(
            check_url("https://example.invalid/")
                .unwrap_err()
                .contains("https")
        );
        assert!(check_url("ftp://x").is_err());
        assert!(check_url("http://").is_err());
    }
}
