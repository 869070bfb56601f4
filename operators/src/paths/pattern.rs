//! Path pattern shapes and their ids.
//!
//! A path pattern is a tree of messages between node names (after `--names` and client
//! aggregation): each tree node is one message `src -> dst`, its children the messages its
//! receiver sent because of it, ordered by send time (WAP5 §5.1). Two instances have the same
//! pattern when their trees are equal; the pattern id is a hash of the tree's canonical text,
//! so the generator's ground truth and the analyser name the same pattern the same way.
//!
//! No state: shapes and the hashes that name them.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// One message in a pattern tree.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PatternNode {
    /// Sending node.
    pub src: String,
    /// Receiving node.
    pub dst: String,
    /// Receiver's port, `None` when it is ephemeral (shown as `*`).
    pub dst_port: Option<u16>,
    /// Messages the receiver sent because of this one, in send order.
    pub children: Vec<PatternNode>,
}

impl PatternNode {
    /// Canonical text: `src>dst:port(child child ...)`, with `*` for an ephemeral port.
    pub fn canonical(&self) -> String {
        let mut s = String::new();
        self.write_canonical(&mut s);
        s
    }

    fn write_canonical(&self, s: &mut String) {
        let _ = write!(s, "{}>{}:", self.src, self.dst);
        match self.dst_port {
            Some(p) => {
                let _ = write!(s, "{p}");
            }
            None => s.push('*'),
        }
        s.push('(');
        for (i, c) in self.children.iter().enumerate() {
            if i > 0 {
                s.push(' ');
            }
            c.write_canonical(s);
        }
        s.push(')');
    }

    /// The tree's messages in preorder: the order of a pattern's hop statistics
    /// ([`PathPattern::hops`](crate::PathPattern::hops)).
    pub fn preorder(&self) -> Vec<&PatternNode> {
        fn walk<'a>(n: &'a PatternNode, out: &mut Vec<&'a PatternNode>) {
            out.push(n);
            for c in &n.children {
                walk(c, out);
            }
        }
        let mut out = Vec::with_capacity(self.len());
        walk(self, &mut out);
        out
    }

    /// `src -> dst:port`, `*` for an ephemeral port: how alerts and correlations name a hop.
    pub fn hop_label(&self) -> String {
        let port = self.dst_port.map_or("*".to_owned(), |p| p.to_string());
        format!("{} -> {}:{}", self.src, self.dst, port)
    }

    /// The pattern id: 16 hex digits of the xxh3 hash of the canonical text.
    pub fn id(&self) -> String {
        format!(
            "{:016x}",
            xxhash_rust::xxh3::xxh3_64(self.canonical().as_bytes())
        )
    }

    /// Number of messages in the tree.
    pub fn len(&self) -> usize {
        1 + self.children.iter().map(PatternNode::len).sum::<usize>()
    }

    /// Always false: a pattern has at least its root message.
    pub fn is_empty(&self) -> bool {
        false
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A pattern node, for the tests of this crate.
    pub(crate) fn node(
        src: &str,
        dst: &str,
        port: Option<u16>,
        children: Vec<PatternNode>,
    ) -> PatternNode {
        PatternNode {
            src: src.into(),
            dst: dst.into(),
            dst_port: port,
            children,
        }
    }

    #[test]
    fn canonical_text_and_stable_id() {
        let t = node(
            "CLIENT",
            "web",
            Some(80),
            vec![
                node("web", "db", Some(5432), vec![]),
                node("web", "CLIENT", None, vec![]),
            ],
        );
        assert_eq!(t.canonical(), "CLIENT>web:80(web>db:5432() web>CLIENT:*())");
        assert_eq!(t.id().len(), 16);
        assert_eq!(t.id(), t.clone().id());
        let mut swapped = t.clone();
        swapped.children.reverse();
        assert_ne!(swapped.id(), t.id());
        assert_eq!(t.len(), 3);
    }
}
