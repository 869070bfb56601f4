//! The TCP stage (SNAP): which connections, hosts, links and applications suffer which TCP
//! problem.
//!
//! ```text
//! tcp stats (sock_diag) -> snap.deltas -> snap        snap.rs: per-connection, per-interval
//! packets               -> tcp.packets                packets.rs: the same evidence from packets
//!                       -> correlate -> alerts        correlate.rs: problems shared (SNAP §2.3)
//! ```
//!
//! - [`snap`]: the kernel's cumulative counters to per-interval evidence and SNAP's
//!   classification of each connection (SNAP §2.1-2.2); [`packets`]: that evidence from
//!   packets instead of the kernel's counters; [`problem`]: SNAP's vocabulary of problems.
//! - [`correlate`]: problems many connections of one host, link or application share;
//!   [`resources`]: what connections share, from a topology file or the traffic itself.
//! - [`flows`]: per-connection summaries of a packet stream (tshark's conversation statistics).
//!
//! State is per connection, freed when a connection has been idle for its expiry, and per
//! resource for the correlation window; each module says which.

pub mod correlate;
pub mod flows;
pub mod hops;
pub mod on_patterns;
pub mod packets;
pub mod problem;
pub mod resources;
pub mod snap;
