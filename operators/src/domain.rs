//! Clock domains: whose clock a timestamp was read from.
//!
//! No state: a type.

use causeway_sources::{OriginId, Origins};
use serde::{Deserialize, Serialize};

/// A clock domain: a sniffer (an origin of packets), or a node that stamped a message-trace
/// row.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Domain {
    /// A sniffer's clock.
    Origin(OriginId),
    /// A traced node's clock.
    Node(crate::names::NodeName),
}

impl Domain {
    /// The name users see.
    pub fn name(&self, origins: &Origins) -> String {
        match self {
            Domain::Origin(o) => origins.name(*o),
            Domain::Node(n) => n.to_string(),
        }
    }
}
