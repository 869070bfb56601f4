//! The paths stage (WAP5 §5, Project 5 §5.1): from messages to the causal paths requests take.
//!
//! ```text
//! messages -> link        paths/link/: per node, the candidate causes of each message sent
//!          |                (WAP5 §5.1), with the delays each link type learns (density)
//!          \-> link.tasks  paths/tasks/: the same question answered by the requests each
//!                           node serves (Project 5's nesting), its evidence in tasks/evidence/
//!          -> paths       paths/build/: instances grown from roots, patterns over a window
//! ```
//!
//! - [`link`]: the `link` operator; [`tasks`]: the `link.tasks` operator. Either gives every
//!   message its [`Linked`](crate::Linked) candidates; `analyze` picks one by `--linker`.
//! - [`density`]: the delay and size distributions `link` learns per link type, against a
//!   time-shifted null (Project 5's scoreboard, §5.1.1.2); [`assign`]: the minimum-cost
//!   assignment both linkers use where candidates conflict.
//! - [`build`]: the `paths` operator; [`child_wait`]: how long it waits for a message's
//!   children, learned per node; [`pattern`]: pattern shapes and their ids.
//!
//! Each operator's state and when it is freed are in its module's documentation: `link`
//! and `link.tasks` hold the messages of their lateness and match windows per node, `paths`
//! the messages that an unfinished path may still reach; all are freed as the frontier passes.

pub mod assign;
pub mod build;
pub mod child_wait;
pub mod density;
pub mod link;
mod log_bins;
pub mod pattern;
pub mod tasks;
