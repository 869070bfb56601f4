//! The command line: `causeway analyze|stats|generate|demo|score|capture|tcp`.

use std::path::PathBuf;
use std::time::Duration;

use causeway_operators::AlertRule;
use clap::{Args, Parser, Subcommand, ValueEnum};

/// Causeway: find where time goes in a distributed system you cannot open up.
///
/// Causeway reads what components say to each other (packets from pcap/pcapng captures,
/// socket calls logged by its preload library, message traces, the kernel's TCP statistics)
/// knowing nothing about the application. Inputs flow through a streaming timely dataflow in
/// event time, in memory bounded by the window, not by the input. It infers the causal path
/// patterns of requests with per-node delays and per-hop latencies (`analyze`), diagnoses TCP
/// connections and what their problems share (`tcp`), and generates synthetic traces with
/// ground truth (`generate`) to score against (`score`).
#[derive(Debug, Parser)]
#[command(
    name = "causeway",
    version,
    propagate_version = true,
    args_override_self = true,
    max_term_width = 100
)]
pub struct Cli {
    /// More log output on stderr (-v: info, -vv: debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Analyse captures and message traces: causal path patterns, messages, clock offsets,
    /// address translations.
    ///
    /// Packets from any number of sniffers become messages: TCP segments between direction
    /// changes fold into one message; copies of a message seen by several sniffers merge,
    /// taking the send time from the sniffer nearest the sender and the receive time from the
    /// one nearest the receiver. Sniffer clocks are aligned first and their offsets and drift
    /// estimated continuously; load-balancer address translations are learned and messages
    /// named by the real servers. Message linking (WAP5) then infers, for each message a node
    /// sends, which message it received probably caused it, builds the causal path of every
    /// request and aggregates them into path patterns with per-node delays and per-hop network
    /// latencies, reported continuously over a sliding window and in total.
    ///
    /// With --live it captures from network interfaces itself (Linux, needs CAP_NET_RAW) and
    /// reports as it goes until Ctrl-C, SIGTERM, --duration or --count ends the run; the final
    /// patterns and statistics are then written and the exit status is 0.
    ///
    /// Examples:
    ///   causeway analyze web1=web1.pcap db=db.pcapng.gz
    ///   causeway analyze --format jsonl -o out.jsonl --names hosts.txt trace.csv
    ///   causeway analyze --emit patterns,instances --format jsonl --names names.txt messages.csv
    ///   ssh web1 tcpdump -c 100000 -w - | causeway analyze web1=-
    ///   causeway analyze --live eth0 --filter 'tcp and port 80' --emit-every 1s
    ///   causeway analyze --live any --filter 'not port 22' --write cap.pcapng \
    ///       --emit patterns,stats --emit-every 1s --format jsonl -o live.jsonl
    #[command(verbatim_doc_comment)]
    Analyze(Box<AnalyzeArgs>),
    /// Capture statistics: packets, bytes, time span, protocols, conversations, damage.
    ///
    /// What capinfos and tshark's conversation statistics tell, for any mix of pcap, pcapng,
    /// gzip-compressed captures and message traces.
    ///
    /// Examples:
    ///   causeway stats capture.pcapng
    ///   causeway stats --format json *.pcap.gz
    #[command(verbatim_doc_comment)]
    Stats(StatsArgs),
    /// Write a synthetic trace with ground truth (after Project 5's maketrace).
    ///
    /// Tracelets (templates of message sequences between named nodes, with delays drawn from
    /// Gaussian, log-normal, gamma, Pareto or bimodal families, and calls a cache may skip)
    /// are instantiated by concurrent clients with think times. The system is a preset, a
    /// TOML file, or drawn at random from the seed (--random). The output directory receives
    /// one pcap per sniffer (real TCP: handshake, segments, ACKs, FIN; and UDP) or a
    /// message-trace CSV, a names file, and truth.jsonl with the true path instances and
    /// patterns.
    ///
    /// Examples:
    ///   causeway generate --preset multi-tier --messages 200000 -o /tmp/mt
    ///   causeway generate --preset children-parallel --parallelism 5 --format csv -o /tmp/cp
    ///   causeway generate --config my-system.toml --sniffers per-host --clock-offset 10ms -o /tmp/x
    ///   causeway generate --random --seed 3 --print-system
    ///   causeway generate --random --seed 3 --parallelism 3 --format csv --endpoints names \
    ///       --no-kind --resolution 1ms -o /tmp/r3
    #[command(verbatim_doc_comment)]
    Generate(GenerateArgs),
    /// Generate a multi-tier trace in a temporary directory and analyse it.
    Demo(DemoArgs),
    /// Score inferred path patterns against a generator's ground truth (Project 5 §7.5.1).
    ///
    /// Reads the truth.jsonl that `causeway generate` wrote and the JSON lines that
    /// `causeway analyze --format jsonl --emit patterns,instances` wrote, and reports: false
    /// negatives among the top N patterns as a function of N (exact, and ignoring near-ties
    /// within 2% and 6%), false-positive patterns, instance- and message-level recall, and the
    /// error of per-node mean delays on the patterns found.
    ///
    /// Examples:
    ///   causeway score --truth /tmp/mt/truth.jsonl patterns.jsonl
    ///   causeway score --truth truth.jsonl --rank count --format json patterns.jsonl
    ///   causeway score --truth truth.jsonl --baseline latest-in
    #[command(verbatim_doc_comment)]
    Score(ScoreArgs),
    /// Run a program with its socket calls logged (WAP5's LibSockCap), as strace runs one.
    ///
    /// Sets LD_PRELOAD to Causeway's preload library (libcauseway_preload.so, next to this
    /// binary unless --preload says otherwise) and CAUSEWAY_CAPTURE_DIR to DIR, then runs the
    /// command. Every process it starts, and their children, write one log per process image
    /// into DIR: each socket, connect, accept, bind, send and receive call, with timestamps,
    /// byte counts, both endpoint names, peer pids of UNIX sockets and payload hashes of
    /// datagrams; never payloads. The program runs unchanged (statically linked programs are
    /// not traced). Exits with the command's exit status. Then `causeway analyze DIR`; for
    /// several hosts, capture on each and analyse the directories together.
    ///
    /// Examples:
    ///   causeway capture -o /tmp/cap -- nginx -g 'daemon off;'
    ///   causeway capture -o /tmp/cap -- python3 -m http.server 8000
    ///   causeway analyze /tmp/cap
    #[command(verbatim_doc_comment)]
    Capture(CaptureArgs),
    /// Diagnose TCP connections (SNAP): which connections suffer which problem, when, and
    /// which host, link or application the problem is shared by.
    ///
    /// Reads the kernel's per-socket TCP statistics, polled live through netlink sock_diag
    /// (--live, as `ss -ti` reads them; run it in the network namespace to watch) or from
    /// `ss -tin` output captured repeatedly (blocks preceded by `### <unix time>`), and TCP
    /// packets from pcap/pcapng captures. Each connection is classified per interval into
    /// SNAP's classes: sndbuf_limited, fast_retransmit, timeout, delayed_ack, rwnd_limited,
    /// or app_limited when none applies; runs of a class become `conn_problem` records.
    /// Connections sharing a host, a link (--topology; without one, the routers their
    /// packets' TTLs show) or an application whose problems rise and fall together (average
    /// Pearson correlation above --alpha) become `correlation` records and an `alert`.
    ///
    /// Examples:
    ///   causeway tcp --live --duration 1m --topology topo.txt
    ///   while sleep 0.25; do echo "### $(date +%s.%N)"; ss -tin; done > ss.log   # then:
    ///   causeway tcp --format jsonl ss.log
    ///   causeway tcp capture.pcap
    #[command(verbatim_doc_comment)]
    Tcp(TcpArgs),
}

/// `causeway tcp`.
#[derive(Debug, Args)]
pub struct TcpArgs {
    /// `ss -tin` logs (optionally .gz) and pcap/pcapng captures; NAME=PATH names the host or
    /// sniffer. Not needed with --live.
    #[arg(value_name = "INPUT", required_unless_present = "live")]
    pub inputs: Vec<String>,
    /// Poll this host's TCP sockets through netlink sock_diag (needs no privileges for the
    /// caller's network namespace; run under `ip netns exec NS` for another).
    #[arg(long)]
    pub live: bool,
    /// Stop after this long (wall clock) and report what was read; a live run otherwise
    /// stops at Ctrl-C or SIGTERM.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// With --live: the poller's CPU budget, percent of one core (SNAP §7): above it the
    /// polling slows down, quiet connections first.
    #[arg(long, value_name = "PERCENT", default_value_t = 5.0)]
    pub cpu_budget: f64,
    /// With --live: the name of this host in the output.
    #[arg(long, value_name = "NAME", default_value = "live")]
    pub host: String,
    /// Conn problems and correlated sets listed in the table.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub snap: SnapArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub output: OutputArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub engine: EngineArgs,
}

/// TCP diagnosis (SNAP) settings, for `tcp` and `analyze --emit problems`.
#[derive(Debug, Args, Clone)]
pub struct SnapArgs {
    /// Mean interval of the live poller (Poisson-distributed), and the interval over which
    /// packets are summarised per connection.
    #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = parse_duration, help_heading = "TCP diagnosis")]
    pub interval: Duration,
    /// Topology file naming links (`link NAME CIDR CIDR`), hosts (`host NAME IP`) and
    /// applications (`app NAME PORT...`) for correlation.
    #[arg(long, value_name = "FILE", help_heading = "TCP diagnosis")]
    pub topology: Option<PathBuf>,
    /// SNAP's MaxQueuingDelay: RTTs above the minimum RTT plus this are not queuing.
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = parse_duration, help_heading = "TCP diagnosis")]
    pub max_queuing_delay: Duration,
    /// The receivers' delayed-ACK timeout (Linux 40-200 ms, Windows 200 ms); 90% of it is
    /// used, as SNAP does.
    #[arg(long, value_name = "DURATION", default_value = "40ms", value_parser = parse_duration, help_heading = "TCP diagnosis")]
    pub delayed_ack_timeout: Duration,
    /// The senders' minimum retransmission timeout (Linux 200 ms): from packets, a
    /// retransmission after this much silence without duplicate ACKs is a timeout.
    #[arg(long, value_name = "DURATION", default_value = "200ms", value_parser = parse_duration, help_heading = "TCP diagnosis")]
    pub min_rto: Duration,
    /// Correlation: aggregation interval t of the performance vectors.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration, help_heading = "TCP diagnosis")]
    pub aggregation: Duration,
    /// Correlation: correlation interval T (the sliding window).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration, help_heading = "TCP diagnosis")]
    pub correlation_window: Duration,
    /// Correlation: the average correlation coefficient above which a set is reported.
    #[arg(
        long,
        value_name = "ALPHA",
        default_value_t = 0.4,
        help_heading = "TCP diagnosis"
    )]
    pub alpha: f64,
    /// Correlation: sets reported per interval, best first.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 20,
        help_heading = "TCP diagnosis"
    )]
    pub top_sets: usize,
    /// Do not report `app_limited` runs (the healthy class).
    #[arg(long, help_heading = "TCP diagnosis")]
    pub no_app_limited: bool,
}

/// `causeway capture`.
#[derive(Debug, Args)]
pub struct CaptureArgs {
    /// Directory for the logs (created if missing; logs already there are kept).
    #[arg(short = 'o', long, value_name = "DIR")]
    pub output: PathBuf,
    /// The preload library (default: libcauseway_preload.so next to this binary, else
    /// $CAUSEWAY_PRELOAD).
    #[arg(long, value_name = "FILE")]
    pub preload: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// How path patterns are ranked (WAP5 §6.6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum RankArg {
    /// Expected number of true instances (sum of instance probabilities).
    #[default]
    Expected,
    /// Raw count of instances inferred.
    Count,
    /// Expected / count: the mean probability of an instance.
    Confidence,
    /// Expected / sqrt(count): confidence that grows, sublinearly, with repetition.
    Sqrt,
}

impl RankArg {
    /// The ranking score of a pattern with this `count` and `expected` count.
    pub fn score(self, count: u64, expected: f64) -> f64 {
        causeway_operators::Rank::from(self).score(count, expected)
    }
}

impl From<RankArg> for causeway_operators::Rank {
    fn from(r: RankArg) -> Self {
        match r {
            RankArg::Expected => causeway_operators::Rank::Expected,
            RankArg::Count => causeway_operators::Rank::Count,
            RankArg::Confidence => causeway_operators::Rank::Confidence,
            RankArg::Sqrt => causeway_operators::Rank::Sqrt,
        }
    }
}

/// What a node is in socket-call logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum NodeGranularityArg {
    /// Each process: `program[pid]@host`.
    #[default]
    Process,
    /// Each host.
    Host,
}

/// How path instances aggregate into patterns (WAP5 §2.5.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum AggregateArg {
    /// Client nodes become `CLIENT` and ephemeral ports `*` (WAP5).
    #[default]
    Clients,
    /// Also servers of one role (names file's third column, else the name without its
    /// trailing digits) are merged: isomorphic paths through different replicas aggregate.
    Roles,
}

/// How `link` estimates a node pair's mean causal delay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum DelayEstimateArg {
    /// WAP5: the mean of the smallest delay preceding each message.
    #[default]
    Smallest,
    /// The mean of candidate delays weighted by their link probabilities (the iteration WAP5
    /// suggests).
    Weighted,
}

/// Which linker finds each message's cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LinkerArg {
    /// `tasks` for message traces that name their nodes (no ports: nothing pairs a reply
    /// with its request but timing and structure), `wap5` where endpoints give connections
    /// (captures, socket-call logs, `ip:port` traces), on which it is measured more accurate.
    #[default]
    Auto,
    /// By the requests each node serves: a request opens a task at its receiver, a reply
    /// closes one of its caller's, a call joins one; delays, call sets and the order tasks
    /// are taken up in are learned from the data. Needs no ports: node-name traces,
    /// call/return traces (`kind`), captures alike.
    Tasks,
    /// WAP5's candidate parents, weighed per message with the connections' structure and
    /// learned densities (--delay-model, --match-window, --spontaneous).
    Wap5,
}

/// How `link` weighs a candidate parent by its delay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum DelayModelArg {
    /// WAP5: e^(-delay/d), d the node pair's mean causal delay (favours the most recent).
    Exponential,
    /// The delay's density in the distribution learned for its link type (the nodes and
    /// message kinds of parent and child), as Project 5's scoreboard learns it, refined by
    /// the link probabilities: favours the typical delay.
    #[default]
    Learned,
}

/// A trivial linker `causeway score` can score instead of analyze's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BaselineArg {
    /// The parent of a message a node sends is the latest message the node received at or
    /// before the send (its own clock; at equal times the one listed earlier); messages from
    /// clients are roots.
    LatestIn,
}

/// `causeway score`.
#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// The generator's truth.jsonl.
    #[arg(long, value_name = "TRUTH")]
    pub truth: PathBuf,
    /// JSON lines written by `causeway analyze --format jsonl` (patterns, and instances for
    /// the instance- and message-level figures); `-` reads stdin.
    #[arg(value_name = "PATTERNS", required_unless_present = "baseline")]
    pub patterns: Option<String>,
    /// Score a trivial linker run on the truth's own messages instead, and print its
    /// message-level recall (the share of messages given their true parent), to set beside
    /// analyze's. latest-in: a message's parent is the latest message its sender received
    /// at or before sending it (the sender's clock; at equal times the row listed earlier);
    /// messages from clients are roots. A client is a node that never receives a call (with
    /// a kind column; else one no other node ever speaks to first).
    #[arg(long, value_enum, value_name = "LINKER", conflicts_with = "patterns")]
    pub baseline: Option<BaselineArg>,
    /// How to rank the inferred patterns (the truth is ranked by count).
    #[arg(long, value_enum, default_value_t = RankArg::Expected)]
    pub rank: RankArg,
    /// Largest N for the top-N false negatives (default: the number of true patterns).
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// `table` (default) or `json` (one object).
    #[arg(long, value_enum, default_value_t = ScoreFormatArg::Table)]
    pub format: ScoreFormatArg,
}

/// Output of `causeway score`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ScoreFormatArg {
    /// Human-readable tables.
    Table,
    /// One JSON object.
    Json,
}

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// A summary table for people.
    Table,
    /// One JSON object per line (the output contract; see docs/output.md).
    Jsonl,
    /// One JSON array.
    Json,
}

impl From<FormatArg> for causeway_sinks::Format {
    fn from(f: FormatArg) -> Self {
        match f {
            FormatArg::Table => causeway_sinks::Format::Table,
            FormatArg::Jsonl => causeway_sinks::Format::Jsonl,
            FormatArg::Json => causeway_sinks::Format::Json,
        }
    }
}

/// Where and how results are written.
#[derive(Debug, Args, Clone)]
pub struct OutputArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = FormatArg::Table)]
    pub format: FormatArg,
    /// Write results to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Another destination for every record, besides the main output (repeatable):
    /// `jsonl:PATH` (JSON lines; `jsonl:-` for stdout), `exec:COMMAND` (JSON lines piped
    /// into `sh -c COMMAND`, e.g. an alert script; it is waited for at the end) or
    /// `webhook:URL` (each alert POSTed as JSON to an http:// URL, through an on-disk queue
    /// that outlives a receiver that is down; see --webhook-*).
    #[arg(long = "sink", value_name = "KIND:TARGET")]
    pub sinks: Vec<String>,
    /// Records each --sink may hold while it catches up (it runs on a thread of its own; the
    /// main output is written in line and always blocks).
    #[arg(long, value_name = "N", default_value_t = 65_536)]
    pub sink_buffer: usize,
    /// What a --sink whose buffer is full does: block (wait; nothing is lost, the run slows
    /// down) or drop-newest (drop the record, count it, report the count at the end).
    #[arg(long, value_enum, default_value_t = WhenFullArg::Block)]
    pub sink_when_full: WhenFullArg,
    /// JSON-lines files (-o with --format jsonl, and jsonl:PATH sinks) rotate when they
    /// would pass this size (suffixes K, M, G): FILE becomes FILE.1, FILE.1 becomes FILE.2...
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub rotate_size: Option<u64>,
    /// Rotated JSON-lines files kept besides the current one (older ones are deleted).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub rotate_keep: usize,
    /// Serve the latest state (patterns, delays, clock offsets, input counts, alerts) at
    /// http://ADDR/metrics for Prometheus, e.g. 127.0.0.1:9464 (port 0 picks a free one).
    #[arg(long, value_name = "ADDR", help_heading = "Metrics and webhooks")]
    pub metrics: Option<String>,
    /// Webhook sinks: the directory under which each URL's queue of undelivered alerts is
    /// kept; alerts left there are sent by the next run [default: $XDG_STATE_HOME/causeway/webhook,
    /// else ~/.local/state/causeway/webhook].
    #[arg(long, value_name = "DIR", help_heading = "Metrics and webhooks")]
    pub webhook_queue: Option<PathBuf>,
    /// Webhook sinks: most alerts queued per URL; beyond, new alerts are dropped and counted.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 10_000,
        help_heading = "Metrics and webhooks"
    )]
    pub webhook_queue_max: usize,
    /// Webhook sinks: most bytes queued per URL (suffixes K, M, G); beyond, new alerts are
    /// dropped and counted.
    #[arg(long, value_name = "BYTES", default_value = "64M", value_parser = parse_size, help_heading = "Metrics and webhooks")]
    pub webhook_queue_bytes: u64,
    /// Webhook sinks: time limit of one request.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration, help_heading = "Metrics and webhooks")]
    pub webhook_timeout: Duration,
    /// Webhook sinks: how long the end of a run waits for the queue to empty before it
    /// reports what is left (pending) and exits.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, help_heading = "Metrics and webhooks")]
    pub webhook_drain: Duration,
    /// Progress on stderr while inputs are read: auto (a bar when stderr is a terminal),
    /// always (also a line every 5 s when it is not, for logs) or never.
    #[arg(long, value_enum, default_value_t = ProgressArg::Auto)]
    pub progress: ProgressArg,
}

/// What a full sink buffer does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WhenFullArg {
    /// Wait for room.
    Block,
    /// Drop the newest record and count it.
    DropNewest,
}

impl From<WhenFullArg> for causeway_sinks::WhenFull {
    fn from(w: WhenFullArg) -> Self {
        match w {
            WhenFullArg::Block => causeway_sinks::WhenFull::Block,
            WhenFullArg::DropNewest => causeway_sinks::WhenFull::DropNewest,
        }
    }
}

/// When to show progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProgressArg {
    /// When stderr is a terminal.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// How the dataflow runs: worker threads and timely's process settings.
#[derive(Debug, Args, Clone)]
pub struct EngineArgs {
    /// Worker threads per process.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub workers: usize,
    /// Number of processes in a cluster run (timely's -n).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub processes: usize,
    /// This process's index in a cluster run, 0-based (timely's -p).
    #[arg(long, value_name = "I", default_value_t = 0)]
    pub process: usize,
    /// File with one host:port per line, one line per process (timely's -h). Without it,
    /// processes listen on localhost:2101, 2102, ...
    #[arg(long, value_name = "FILE")]
    pub hostfile: Option<PathBuf>,
    /// How far behind the newest record the event-time watermark stays. Records older than
    /// that are counted as late (and still used). [default: 2s; 50ms when every input is an
    /// `analyze --live` sniffer (each kernel ring hands its packets over in time order, and
    /// the watermark of one that has handed nothing over follows the time it was last found
    /// empty) or a followed capture directory (--follow); when every input is a message-trace file in time
    /// order (no host's clock offset), how far its rows are out of order, as measured before
    /// the run, plus 100ms, at most 2s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub lateness: Option<Duration>,
    /// How far (event time) the inputs are read ahead of the finished results, at most. More
    /// lets the workers run without waiting on each other; less bounds memory on busy
    /// inputs. Beyond the pipeline's own hold-back (the seconds that reconciliation, the
    /// clock correction, linking and paths wait for late records), a reader also stops once
    /// 200,000 of its records are in flight. A limit below that hold-back is raised when the
    /// results are seen to stall (standing still while the process is idle; noted at -v),
    /// while the pipeline starts up only until the results have passed where the reader
    /// stood. [default: 60s, or more with a long --lateness or --reconcile-window]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub read_ahead: Option<Duration>,
    /// Memory this process should stay under (suffixes K, M, G; 0: no limit). Nearing it,
    /// the stages that wait on event time (clock correction, linking, paths, the sources'
    /// lateness) wait less: their oldest undecided state is decided early and freed rather
    /// than the process being killed; what was decided early is counted and reported at
    /// the end. [default: three quarters of the machine's memory, or of the cgroup's limit]
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub memory_limit: Option<u64>,
}

impl EngineArgs {
    /// `--lateness`, or its default: 2 s, or [`LIVE_LATENESS`] when every input is live on
    /// this host.
    pub fn lateness(&self, all_live: bool) -> Duration {
        self.lateness.unwrap_or(if all_live {
            LIVE_LATENESS
        } else {
            Duration::from_secs(2)
        })
    }
}

/// The reconciliation window of a run whose inputs are all live sniffers on this host: their
/// packets are stamped by one clock, but a packet forwarded from one interface to another
/// may wait in a queue (a shaper's) between its two sightings.
pub const LIVE_WINDOW: Duration = Duration::from_millis(250);

/// The lateness of a run whose inputs are all live on this host: how far out of time order
/// one kernel ring (or a followed directory) hands records over. A ring hands packets over in
/// the order they were queued to it, stamped on several CPUs; its watermark, while it has
/// nothing to hand over, follows when it was last found empty minus how long a packet may
/// wait in it (`RingConfig::hold_back`), so the lateness need not cover that wait. On the live
/// harness (loopback, 10,000 and 20,000 requests/s) no packet came late with 1 ms.
pub const LIVE_LATENESS: Duration = Duration::from_millis(50);

/// The lateness and reconciliation window when every input is a followed capture directory
/// (`analyze --follow`): its calls come in time order, half a second old, from one host.
pub const FOLLOW_WINDOW: Duration = Duration::from_millis(50);

/// The lateness beyond a message trace's measured disorder when every input is a message-trace
/// file in time order: what the clock correction may still move a message by (a few
/// milliseconds of residual offset on the traces measured), with room to spare.
pub const TRACE_MARGIN: Duration = Duration::from_millis(100);

/// About how many messages a warm start of message traces learns from at most: its default
/// two seconds, or the time these take at the traces' rate if shorter (the generator's
/// multi-tier preset at parallelism 45 sends 190,000 messages in two seconds).
pub const WARMUP_MESSAGES: u64 = 200_000;

/// Replay speed: `max`, or a factor such as `1`, `10x`, `0.5x`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Speed(pub Option<f64>);

/// Parses `max`, `1`, `10x`, `0.5x`.
pub fn parse_speed(s: &str) -> Result<Speed, String> {
    if s.eq_ignore_ascii_case("max") {
        return Ok(Speed(None));
    }
    match s.trim_end_matches(['x', 'X']).parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(Speed(Some(v))),
        _ => Err(format!(
            "`{s}`: expected max or a positive factor such as 1, 10x, 0.5x"
        )),
    }
}

/// Replaying inputs and ending a run early.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// Replay the inputs at their recorded pace times this factor (`1`, `10x`, `0.5x`), the
    /// files merged in timestamp order; `max` reads as fast as possible.
    #[arg(long, value_name = "SPEED", default_value = "max", value_parser = parse_speed)]
    pub speed: Speed,
    /// Stop reading after this long (wall clock) and report what was read.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Stop reading after N records (packets, rows, calls, samples) and report them.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Settings in TOML, named as the long options (`emit-every = "10s"`, `alert = [...]`,
    /// `sink = [...]`, `inputs = [...]`); the command line overrides them, lists add up.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Live capture (`analyze --live`).
#[derive(Debug, Args, Clone)]
pub struct LiveArgs {
    /// Capture packets from this network interface as they pass (`any`: every interface of
    /// this network namespace, loopback included), and analyse them live. Repeatable; each
    /// interface is a sniffer named after it. Linux only; needs CAP_NET_RAW. A live sniffer is
    /// not sampled beforehand, so it counts as a segment sniffer unless --sniffer IFACE=IP,...
    /// says which addresses are its host's.
    #[arg(
        long = "live",
        id = "live",
        value_name = "IFACE",
        help_heading = "Live capture"
    )]
    pub interfaces: Vec<String>,
    /// Capture only packets matching EXPR, in tcpdump's filter language: [src|dst] host ADDR,
    /// [src|dst] net ADDR/LEN, [tcp|udp|sctp] [src|dst] port N, portrange N-M, ip, ip6, arp,
    /// tcp, udp, sctp, icmp, icmp6, joined by and, or, not and parentheses (and/or bind
    /// equally, left to right, as in tcpdump). Runs in the kernel (classic BPF): what does
    /// not match never reaches causeway. Example: 'tcp and port 80 and not host 10.0.0.9'.
    #[arg(
        long,
        value_name = "EXPR",
        requires = "live",
        help_heading = "Live capture"
    )]
    pub filter: Option<String>,
    /// Bytes kept of each packet, link-layer header included (128 to 262144, default 262144,
    /// whole packets). Analysis needs the headers and, to tell copies of a message apart
    /// across sniffers, the payload.
    #[arg(
        long,
        value_name = "BYTES",
        requires = "live",
        help_heading = "Live capture"
    )]
    pub snaplen: Option<u32>,
    /// Also save what is captured to FILE as pcapng (nanosecond timestamps; Ethernet frames,
    /// or Linux cooked v2 headers for `any`, as tcpdump writes them), flushed as it goes and
    /// at the end. `causeway analyze FILE` replays it. Needs exactly one --live.
    #[arg(
        long,
        value_name = "FILE",
        requires = "live",
        help_heading = "Live capture"
    )]
    pub write: Option<PathBuf>,
}

/// `causeway analyze`.
#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// Captures (pcap, pcapng, optionally .gz) and message traces (CSV). NAME=PATH names the
    /// sniffer (its clock domain); otherwise the file's stem does. `-` reads stdin. Not
    /// needed with --live.
    #[arg(required_unless_present = "live", value_name = "INPUT")]
    pub inputs: Vec<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub capture: LiveArgs,
    /// File mapping addresses to node names, one `ADDRESS NAME` per line (as /etc/hosts;
    /// ADDRESS is an IP or IP:port).
    #[arg(long, value_name = "FILE")]
    pub names: Option<PathBuf>,
    /// What to report (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [EmitArg::Patterns, EmitArg::Messages, EmitArg::Clock, EmitArg::Nat, EmitArg::Stats])]
    pub emit: Vec<EmitArg>,
    /// Socket-call logs: whether each process is a node (`program[pid]@host`) or each host.
    #[arg(long, value_enum, default_value_t = NodeGranularityArg::Process)]
    pub node_granularity: NodeGranularityArg,
    /// Follow capture directories (of `causeway capture`) while their programs run: new logs
    /// are picked up, logs are read as they grow, and reports go on until Ctrl-C, SIGTERM,
    /// --duration or --count, as with --live. Records are taken in once 0.5 s old (the
    /// library writes a thread's buffer out 100 ms after its first record, at the latest at
    /// the thread's next call; what comes later is counted late).
    #[arg(long)]
    pub follow: bool,
    /// A sniffer on a host: NAME=IP[,IP...] says which addresses are the host's own (else
    /// inferred from the traffic). Repeatable.
    #[arg(long, value_name = "NAME=IP,...")]
    pub sniffer: Vec<String>,
    /// An input read from a pipe (`-`, or a FIFO) that has said nothing for this long is taken
    /// for a live capture gone quiet (`tcpdump -U -w - | causeway analyze -`): its watermark
    /// then moves on with this host's clock from its newest record, so the reports go on.
    /// Records that come later but are older are counted late. `0s` turns it off.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub pipe_idle: Duration,
    /// How long after a message's first sighting the other sniffers' sightings are awaited
    /// (event time). Must cover network latency plus what is left of clock offsets after
    /// alignment. [default: 2s; 250ms when every input is a --live sniffer; 50ms when every
    /// input is a followed capture directory (--follow)]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub reconcile_window: Option<Duration>,
    /// A TCP message ends after this long without a segment (else at the other side's data,
    /// FIN or RST; or, once everything it sent is acknowledged, after its connection's quiet
    /// gap: four times the longest such pause its messages went on after, at least 50 ms, at
    /// most this, learned once the connection has begun 8 messages).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub message_gap: Duration,
    /// The clock the others are measured against: a sniffer's or a node's name (default: the
    /// first capture's sniffer; for message traces alone, the node with the smallest name
    /// among those seen both ways).
    #[arg(long, value_name = "NAME")]
    pub clock_reference: Option<String>,
    /// Seconds of evidence each clock estimate uses.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub clock_window: Duration,
    /// How often clock offsets are reported (event time); always also at the end.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub clock_every: Duration,
    /// Messages needed before a TCP address translation is reported (UDP needs more).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub nat_evidence: u64,
    /// A conversation without packets for this long is reported and forgotten.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Report path patterns (default every 10s) and statistics every DURATION of event time,
    /// not only at the end.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub emit_every: Option<Duration>,
    /// Conversations, node pairs and path patterns listed in the table.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    /// Linking: which linker finds each message's cause.
    #[arg(long, value_enum, default_value_t = LinkerArg::Auto, help_heading = "Paths")]
    pub linker: LinkerArg,
    /// Linking (tasks): the order priors tried on the warm-up, each the odds that a node
    /// takes up a later-arrived waiting task before an earlier one (1: no preference; near 0:
    /// first come, first served). The one under which the warm-up is likeliest is used.
    #[arg(long, value_name = "RHO,...", value_delimiter = ',', default_values_t = [1.0, 0.5, 0.2, 0.1], help_heading = "Paths")]
    pub order_prior: Vec<f64>,
    /// Linking: the longest a node may hold a message before sending what it caused (WAP5's
    /// x); longer gaps are not causal. A path waits at most this long for more children of a
    /// message; less once its node's children's delays are learned (twice their 99.9th
    /// percentile), so live paths are reported sooner. Linking looks back, and keeps what
    /// it received, for less too once every sending node's causes are learned (twice the
    /// longest such wait), so busy systems with short delays need less memory.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration, help_heading = "Paths")]
    pub max_delay: Duration,
    /// Linking: being spontaneous weighs as much as a delay of Y times the pair's mean delay
    /// (WAP5's y), at even odds; with learned delays each call type's learned odds of being
    /// spontaneous scale it. Larger values prefer longer paths.
    #[arg(long, value_name = "Y", default_value_t = 4.0, help_heading = "Paths")]
    pub spontaneous: f64,
    /// Linking: a node's calls are assigned to the requests they serve jointly, over windows
    /// of this much event time (each cause taking one call, a further one at a penalty),
    /// instead of one by one as they come; 0 links each call on its own. A window's output
    /// is held back until it closes. Of 0, 5, 10, 25, 50 and 100 ms, 5-10 ms did best on
    /// Project 5's multi-tier traces at parallelism 45 (the pathological and less parallel
    /// ones did as well at any of them).
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = parse_duration, help_heading = "Paths")]
    pub match_window: Duration,
    /// Linking: a warm start. The first DURATION of event time is linked twice: once to learn
    /// the nodes' causal delays, and again, with what was learned, for the output, which
    /// waits until then, and the first DURATION costs twice the work. Early decisions are
    /// otherwise made while the learned delays have seen little (on Project 5's multi-tier
    /// trace at parallelism 45 the worst per-node delay error fell from 5.8-7.2% to
    /// 4.5-4.8%). At most two million inputs are held (each message counts twice); the
    /// warm-up ends early when they are reached. `0s` links once, as it comes. [default: 2s,
    /// or for message traces the time their first 200,000 messages take if shorter (at their
    /// mean rate); 0s when every input is a --live sniffer, which reports as soon as it can]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Paths")]
    pub warmup: Option<Duration>,
    /// Linking: how each node pair's mean causal delay is estimated.
    #[arg(long, value_enum, default_value_t = DelayEstimateArg::Smallest, help_heading = "Paths")]
    pub delay_estimate: DelayEstimateArg,
    /// Linking: how a candidate parent is weighed by its delay.
    #[arg(long, value_enum, default_value_t = DelayModelArg::Learned, help_heading = "Paths")]
    pub delay_model: DelayModelArg,
    /// Try-both decisions per path tree (up to 2^N instances from one root).
    #[arg(long, value_name = "N", default_value_t = 4, help_heading = "Paths")]
    pub try_both: u32,
    /// Sliding window of the windowed pattern reports (cumulative totals are reported too).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration, help_heading = "Paths")]
    pub window: Duration,
    /// How instances aggregate into patterns.
    #[arg(long, value_enum, default_value_t = AggregateArg::Clients, help_heading = "Paths")]
    pub aggregate: AggregateArg,
    /// How patterns are ranked in the table.
    #[arg(long, value_enum, default_value_t = RankArg::Expected, help_heading = "Paths")]
    pub rank: RankArg,
    /// A path whose root is this old is reported whatever may still come.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration, help_heading = "Paths")]
    pub max_path: Duration,
    /// Most patterns kept in memory; beyond, the least expected are evicted and retracted.
    /// Their statistics are most of the memory a long run needs.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 2_000,
        help_heading = "Paths"
    )]
    pub max_patterns: usize,
    /// Most memory the pattern table may hold: every pattern's totals, window and
    /// distributions (suffixes K, M, G). Beyond, the least expected patterns are evicted and
    /// retracted, until it holds three quarters of this; so a long run's memory stays flat.
    #[arg(long, value_name = "BYTES", default_value = "64M", value_parser = parse_size, help_heading = "Paths")]
    pub pattern_memory: u64,
    /// A pattern whose instances together are less likely than this (its expected count) is
    /// dropped and retracted once its last instance has left the --window: single improbable
    /// alternatives, which would otherwise pile up over a long run. 0 keeps every pattern
    /// (until --max-patterns).
    #[arg(long, value_name = "P", default_value_t = 0.5, help_heading = "Paths")]
    pub min_expected: f64,
    /// Raise an `alert` record, sent to every sink, when a rule starts to hold (and a
    /// `resolved` one when it stops); repeatable. Judged over the sliding --window at every
    /// snapshot (--emit-every). Rules:
    ///   new-pattern                      a path pattern not seen in the first window
    ///   new-pattern >= 5                 the same, once it has 5 instances in the window
    ///   pattern.p99 > 200ms              end-to-end latency (mean, p50, p90, p99)
    ///   pattern.count < 10               instances in the window (count, likeliest,
    ///                                    expected)
    ///   node.delay.mean > 2x baseline    a node's delay against its own moving average
    ///   hop.network.p99 > 5ms            one-way network latency of a hop
    /// Operators: > >= < <=. Prefix `critical:` for critical alerts (default warning).
    #[arg(
        long,
        value_name = "RULE",
        help_heading = "Alerts",
        verbatim_doc_comment
    )]
    pub alert: Vec<AlertRule>,
    /// Save the path patterns (totals, window, distributions) to DIR/paths.json every
    /// --checkpoint-every and at the end; a run started with the same DIR takes them over and
    /// skips the input it already analysed (records before the saved event time, counted as
    /// skipped `resumed`). After a clean stop the resumed totals are exact; after a crash the
    /// paths that were in flight at the last save are missed.
    #[arg(long, value_name = "DIR", help_heading = "Paths")]
    pub checkpoint: Option<PathBuf>,
    /// Wall-clock time between checkpoint saves.
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_duration, help_heading = "Paths")]
    pub checkpoint_every: Duration,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub snap: SnapArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub run: RunArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub output: OutputArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub engine: EngineArgs,
}

/// Record kinds `analyze` can report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EmitArg {
    /// Messages (from packets and message traces).
    Messages,
    /// Clock offsets and drift of the sniffers (or traced nodes).
    Clock,
    /// Address translations learned.
    Nat,
    /// Per-input statistics.
    Stats,
    /// Conversation summaries (from packets).
    Flows,
    /// Path patterns, over the sliding window and in total, every --emit-every (default 10s).
    Patterns,
    /// Every finished path instance (its messages, their parents, its probability).
    Instances,
    /// TCP problems per connection from packets (SNAP), correlations and alerts; with
    /// `patterns`, each pattern hop also carries its connections' problems and an alert names
    /// the hops it slows.
    Problems,
}

/// `causeway stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Captures (pcap, pcapng, optionally .gz) and message traces; `-` reads stdin.
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<String>,
    /// Conversations listed in the table.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub run: RunArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub output: OutputArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub engine: EngineArgs,
}

/// What `generate` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TraceFormatArg {
    /// Classic pcap, nanosecond timestamps, Ethernet.
    Pcap,
    /// pcapng, nanosecond timestamps, Ethernet.
    Pcapng,
    /// A message-trace CSV (send_ns, recv_ns, src, dst, bytes, kind, call_id).
    Csv,
}

/// Where `generate` places sniffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SniffersArg {
    /// One sniffer (a mirror port) sees every message once.
    Single,
    /// A sniffer on every server host, in that host's clock; messages between two servers
    /// appear in both captures.
    PerHost,
}

/// How a message trace names the ends of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EndpointsArg {
    /// `ip:port` endpoints.
    #[value(name = "ip-port", alias = "ip:port")]
    IpPort,
    /// Node names; every client is `client`.
    Names,
}

/// `causeway generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// A built-in system: multi-tier (Project 5 Fig. 10), children-parallel, children-0-2,
    /// children-d-cc, penalty-breaker (Project 5 §7.5.2), cdn-miss (WAP5 Fig. 12).
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with_all = ["config", "random"],
        required_unless_present_any = ["config", "random"]
    )]
    pub preset: Option<String>,
    /// A system description in TOML (see `causeway generate --print-preset multi-tier`).
    #[arg(long, value_name = "FILE", conflicts_with = "random")]
    pub config: Option<PathBuf>,
    /// A system drawn at random from --seed, unlike the presets: 2 to 6 tiers of roles with
    /// one to three nodes each; several request types of different weights sharing nodes,
    /// each a call tree of depth 2 to 6 and fan-out 1 to 5, sequential calls and parallel
    /// ones joined when all have returned; calls a cache skips some of the time; each step's
    /// delay from a normal, log-normal, gamma, bimodal or heavy-tailed (Pareto, wide
    /// log-normal) family. See it with --print-system.
    #[arg(long)]
    pub random: bool,
    /// Print the system's TOML (preset, --config or --random; a starting point for --config)
    /// and exit.
    #[arg(long)]
    pub print_system: bool,
    /// Print a preset's TOML (a starting point for --config) and exit.
    #[arg(long, value_name = "NAME", exclusive = true)]
    pub print_preset: Option<String>,
    /// Output directory (created if needed).
    #[arg(
        short,
        long,
        value_name = "DIR",
        required_unless_present_any = ["print_preset", "print_system"]
    )]
    pub output: Option<PathBuf>,
    /// Stop after this many messages.
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    pub messages: u64,
    /// Target mean per-node parallelism as Project 5 defines it (§5.1.2, Table 1): the average
    /// number of candidate parents of each call a server makes, i.e. the calls it serves that
    /// enclose it (the true parent is one). The generator scales think times (and the number of
    /// client loops) until the measured value is close. Without it the system's own think
    /// times are used.
    #[arg(long, value_name = "P")]
    pub parallelism: Option<f64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = TraceFormatArg::Pcap)]
    pub format: TraceFormatArg,
    /// Sniffer placement (pcap and pcapng output).
    #[arg(long, value_enum, default_value_t = SniffersArg::Single)]
    pub sniffers: SniffersArg,
    /// Probability that a sniffer misses a packet (a message-trace row loses a side).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.0)]
    pub loss: f64,
    /// Largest clock offset of a node: each node's clock is off by a uniform random amount
    /// in ±DURATION.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub clock_offset: Option<Duration>,
    /// Largest clock drift of a node, in parts per million (uniform in ±PPM).
    #[arg(long, value_name = "PPM", default_value_t = 0.0)]
    pub drift_ppm: f64,
    /// Random seed: the same seed and options give the same files.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Start time of the trace, in seconds since the epoch.
    #[arg(long, value_name = "UNIX_SECONDS", default_value_t = 1_767_225_600)]
    pub start: u64,
    /// Also gzip-compress the captures (.pcap.gz).
    #[arg(long)]
    pub gzip: bool,
    /// How a message trace (--format csv) names the ends of a message: `ip-port` endpoints,
    /// or `names`, the nodes' names (every client `client`), as tracers that know services
    /// but not addresses write them; truth.jsonl then names nodes the same way.
    #[arg(long, value_enum, value_name = "HOW", default_value_t = EndpointsArg::IpPort)]
    pub endpoints: EndpointsArg,
    /// Leave out the `kind` and `call_id` columns of a message trace (--format csv): which
    /// message is a call and which answers it must then be inferred.
    #[arg(long)]
    pub no_kind: bool,
    /// Truncate a message trace's timestamps (--format csv) to this resolution, as a tracer
    /// with 1 ms timestamps gives them (e.g. 1ms, 10us); truth.jsonl has the same values.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub resolution: Option<Duration>,
    /// Put a DNAT load balancer (node `lb`, address 10.0.255.1) in front of the nodes of
    /// ROLE, as iptables DNAT does: callers address the load balancer, which rewrites the
    /// destination to one of the role's nodes; answers come back from the virtual address.
    /// With per-host sniffers the load balancer has a capture of its own. truth.jsonl lists
    /// the translations under `nat`.
    #[arg(long, value_name = "ROLE")]
    pub dnat: Option<String>,
}

/// `causeway demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Messages to generate.
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    pub messages: u64,
    /// Keep the generated files in DIR instead of a temporary directory.
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub output: OutputArgs,
}

/// Parses a byte count: `65536`, `64K`, `64M`, `1G` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let shift = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches(['B', 'I'])
    {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => {
            return Err(format!(
                "`{s}`: expected a byte count such as 65536, 64K, 64M, 1G"
            ));
        }
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("`{s}`: expected a byte count such as 65536, 64K, 64M, 1G"))
}

/// Parses `500ms`, `2s`, `1m30s`, `10min`, `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("`{s}`: {e} (examples: 500ms, 2s, 10m)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("65536"), Ok(65_536));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("2mb"), Ok(2 << 20));
        assert!(parse_size("").is_err());
        assert!(parse_size("5X").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }
}
