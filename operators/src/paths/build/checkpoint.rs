//! Checkpoints of the pattern table (`--checkpoint`): what is saved and restored. No state
//! of its own.

use super::*;

/// Where and how often `paths` saves its pattern state (`--checkpoint`).
#[derive(Clone, Debug)]
pub struct CheckpointConfig {
    /// The file; written whole to a temporary file beside it, then renamed over it.
    pub path: PathBuf,
    /// Wall-clock time between saves; the end of a run (or a stop) always saves.
    pub every: Duration,
    /// What an earlier run saved, to start from.
    pub restore: Option<Arc<PathsCheckpoint>>,
}

/// What `paths` saves: every pattern's totals and sliding-window buckets (with their full
/// distributions), and the event time from which input remains to be read.
#[derive(Debug, Serialize, Deserialize)]
pub struct PathsCheckpoint {
    /// Format version ([`CHECKPOINT_VERSION`]).
    pub version: u32,
    /// Input before this event time is in the totals: a resumed run skips it.
    pub resume_ns: Time,
    /// Whether it was saved at the end of a run (then exact up to `resume_ns`). A periodic
    /// save leaves out the instances still in flight (those finishing within `--max-delay`
    /// plus the lateness of it); a run resumed from it misses them.
    pub complete: bool,
    pub(super) patterns: Vec<SavedPattern>,
}

/// Version of the checkpoint format.
pub const CHECKPOINT_VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct SavedPattern {
    pub(super) id: String,
    pub(super) tree: PatternNode,
    pub(super) first_ns: Time,
    pub(super) total: Stats,
    pub(super) buckets: Vec<(Time, Stats)>,
}

#[derive(Serialize)]
pub(super) struct SavedPatternRef<'a> {
    pub(super) id: &'a str,
    pub(super) tree: &'a PatternNode,
    pub(super) first_ns: Time,
    pub(super) total: &'a Stats,
    pub(super) buckets: &'a VecDeque<(Time, Stats)>,
}

#[derive(Serialize)]
pub(super) struct PathsCheckpointRef<'a> {
    pub(super) version: u32,
    pub(super) resume_ns: Time,
    pub(super) complete: bool,
    pub(super) patterns: Vec<SavedPatternRef<'a>>,
}

impl PathsCheckpoint {
    /// Reads a checkpoint; `Ok(None)` when there is none yet.
    pub fn load(path: &Path) -> Result<Option<PathsCheckpoint>, String> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        // Pattern trees of long chains nest deeper than serde_json's default limit.
        let c: PathsCheckpoint = crate::json::from_slice_nested(&bytes)
            .map_err(|e| format!("{}: not a checkpoint of this version ({e})", path.display()))?;
        if c.version != CHECKPOINT_VERSION {
            return Err(format!(
                "{}: checkpoint version {}, this build reads {CHECKPOINT_VERSION}",
                path.display(),
                c.version
            ));
        }
        Ok(Some(c))
    }

    /// Patterns saved.
    pub fn patterns(&self) -> usize {
        self.patterns.len()
    }
}

impl Paths {
    /// Takes over the patterns of a checkpoint. Each waits under a stand-in key until an
    /// instance of its shape comes, which moves it to its real key.
    pub(super) fn restore(&mut self, c: &PathsCheckpoint) {
        self.resumed_ns = c.resume_ns;
        for (i, p) in c.patterns.iter().enumerate() {
            let key = u64::MAX - i as u64;
            self.restored.insert(p.id.clone(), key);
            let agg = Agg {
                shape: Vec::new(),
                name: Some(Name {
                    id: p.id.clone(),
                    tree: p.tree.clone(),
                }),
                total: p.total.clone(),
                first_ns: p.first_ns,
                buckets: p.buckets.iter().cloned().collect(),
                touched: true,
                reported: false,
                shown: false,
            };
            self.table_bytes += agg.heap_bytes();
            self.patterns.insert(key, agg);
        }
    }

    /// Saves a checkpoint when one is due (always at the end).
    pub(super) fn save(&mut self, at: Time, last: bool) {
        let Some((config, since)) = &mut self.checkpointer else {
            return;
        };
        if !last && since.elapsed() < config.every {
            return;
        }
        *since = Instant::now();
        let resume_ns = if last {
            self.newest_ns.saturating_add(1)
        } else {
            at
        }
        .max(self.resumed_ns);
        // Every pattern was named by the snapshot that saves it.
        let mut patterns: Vec<SavedPatternRef<'_>> = self
            .patterns
            .values()
            .filter_map(|a| Some((a, a.name.as_ref()?)))
            .map(|(a, name)| SavedPatternRef {
                id: &name.id,
                tree: &name.tree,
                first_ns: a.first_ns,
                total: &a.total,
                buckets: &a.buckets,
            })
            .collect();
        patterns.sort_by(|a, b| a.id.cmp(b.id));
        let saved = PathsCheckpointRef {
            version: CHECKPOINT_VERSION,
            resume_ns,
            complete: last,
            patterns,
        };
        let path = config.path.clone();
        let mut tmp = path.clone().into_os_string();
        tmp.push(".tmp");
        let result = serde_json::to_vec(&saved)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = result {
            tracing::warn!("checkpoint {}: not saved: {e}", path.display());
        }
    }
}
