//! Destination NAT in socket-call logs (WAP5 §7.1, for logs rather than packets): the two
//! ends of one TCP connection through a load balancer's virtual address log different
//! connections. The client logged `client:port → vip:80`; the server it reached logged
//! `client:port → server:8080`. What the translation leaves alone is the connecting end's
//! address, so both views meet on the worker that owns that address, and the two half-traced
//! connections there are joined into one.
//!
//! A join needs all of: both views are TCP with a known opener and the same connecting
//! address; one view has only its connecting end traced, the other only its accepting end;
//! the newer view is at the start of its byte stream (its first call has offset 0); the
//! older view has not reported a message yet and was active within the reconciliation
//! window. A port reused for another destination fails the last two (its old connection has
//! reported its messages, or is older than the window), unless both happen within one window.
//!
//! State: per connecting address, the connections alive with it (a handful); per joined
//! view, the key of the connection it was joined to. Both are freed with the connection.

use std::collections::HashMap;

use causeway_sources::{Address, Opener, SocketCall, Time, Transport};

use super::Connection;

/// The address of the end that connected: what a destination NAT leaves alone.
///
/// When the log did not say which end connected, the end with the higher port is taken
/// (ephemeral ports are above the ports servers listen on), so both ends still agree.
pub(super) fn connector(c: &SocketCall) -> &Address {
    match c.opener {
        Opener::Local => &c.local,
        Opener::Peer => &c.peer,
        Opener::Unknown => match (&c.local, &c.peer) {
            (Address::Endpoint(l), Address::Endpoint(p)) if (p.port, p.ip) > (l.port, l.ip) => {
                &c.peer
            }
            _ => &c.local,
        },
    }
}

/// Joins of translated views; see the module documentation.
#[derive(Debug, Default)]
pub(super) struct Translations {
    /// A joined view's connection key → the key of the connection it was joined to.
    aliases: HashMap<u64, u64>,
    /// Connecting address → keys of the live TCP connections opened from it.
    by_connector: HashMap<Address, Vec<u64>>,
}

impl Translations {
    /// The connection a call's view was joined to, if any.
    pub(super) fn alias(&self, key: u64) -> Option<u64> {
        self.aliases.get(&key).copied()
    }

    /// Remembers a new TCP connection `key` opened from `connector`.
    pub(super) fn opened(&mut self, connector: Address, key: u64) {
        self.by_connector.entry(connector).or_default().push(key);
    }

    /// A call at `at` whose view (`key`) has no connection yet: the live connection that is
    /// the other half of the same translated connection, if one is. On a join, that
    /// connection is named by the real server's address and remembers the virtual one.
    pub(super) fn join(
        &mut self,
        c: &SocketCall,
        key: u64,
        at: Time,
        window: Time,
        connections: &mut HashMap<u64, Connection>,
    ) -> Option<u64> {
        if c.transport != Transport::Tcp || c.offset != 0 || c.opener == Opener::Unknown {
            return None;
        }
        let from_connector = c.opener == Opener::Local;
        let connector = connector(c);
        let candidates = self.by_connector.get(connector)?;
        let found = candidates.iter().copied().find(|k| {
            let Some(conn) = connections.get(k) else {
                return false;
            };
            let Some(ci) = conn.connector else {
                return false;
            };
            let (opener_traced, acceptor_traced) = (
                conn.ends[ci].node.is_some(),
                conn.ends[1 - ci].node.is_some(),
            );
            conn.public.is_none()
                && !conn.reported
                && conn.last_at.saturating_add(window) >= at
                && if from_connector {
                    !opener_traced && acceptor_traced
                } else {
                    opener_traced && !acceptor_traced
                }
        })?;
        let conn = connections.get_mut(&found)?;
        let ci = conn.connector?;
        if from_connector {
            // The server's view came first: this call names the virtual address.
            conn.public = Some(c.peer.clone());
        } else {
            // The client's view came first: its far end was the virtual address.
            let public = std::mem::replace(&mut conn.addresses[1 - ci], c.local.clone());
            conn.public = Some(public);
        }
        conn.aliases.push(key);
        self.aliases.insert(key, found);
        Some(found)
    }

    /// Forgets connection `key` (being dropped) and the views joined to it.
    pub(super) fn forget(&mut self, key: u64, conn: &Connection) {
        for a in &conn.aliases {
            self.aliases.remove(a);
        }
        if let Some(ci) = conn.connector {
            let connector = &conn.addresses[ci];
            if let Some(keys) = self.by_connector.get_mut(connector) {
                keys.retain(|k| *k != key);
                if keys.is_empty() {
                    self.by_connector.remove(connector);
                }
            }
        }
    }
}
