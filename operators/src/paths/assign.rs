//! Minimum-cost assignment on a sparse bipartite graph: rows (children) to columns (possible
//! parents), each row to at most one column and each column to at most one row, every row
//! with a private way out (left unassigned at a cost of its own), so that a full assignment
//! always exists.
//!
//! `link` uses it to decide a node's calls jointly ([`crate::paths::link`]): greedily, in time order,
//! a call takes the task that fits it best and leaves the next call the leftovers; at
//! Project 5's parallelism 45 that assigns a fifth of the calls right, one joint assignment
//! most of them (`tools/assignment.py`).
//!
//! - **Algorithm**: successive shortest augmenting paths (Jonker–Volgenant's augmentation,
//!   sparse): rows are added one at a time, each by a Dijkstra search over alternating paths
//!   with reduced costs kept non-negative by row and column potentials. A search stops at the
//!   first free column it settles, and the row's own way out is always free, so a search
//!   visits only the rows it may displace. Exact (costs are `f64`, non-negative).
//! - **State**: buffers reused from one call to the next; nothing outlives a call.
//! - **Cost**: `O(E log E)` per row in the worst case (`E` edges), far less in practice: the
//!   search ends where the first free column is.
//! - **Determinism**: ties go to the lower column index, then the earlier edge.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A minimum-cost assignment solver, its buffers kept for reuse.
#[derive(Debug, Default)]
pub struct Assign {
    /// Edges of every row: (column, cost), rows one after another.
    edges: Vec<(u32, f64)>,
    /// Where each row's edges begin in `edges`, and each row's way-out cost.
    rows: Vec<(usize, f64)>,
    columns: usize,
    // Solver state.
    row_col: Vec<u32>,
    col_row: Vec<u32>,
    u: Vec<f64>,
    v: Vec<f64>,
    dist: Vec<f64>,
    pred: Vec<u32>,
    settled: Vec<u32>,
    /// Whether a column is settled in the current search.
    done: Vec<bool>,
    touched: Vec<u32>,
    heap: BinaryHeap<Entry>,
}

/// Unassigned.
pub const NONE: u32 = u32::MAX;

/// A heap entry: a column (or a row's way out, `columns + row`) and its tentative distance.
#[derive(Debug, PartialEq)]
struct Entry(f64, u32);

impl Eq for Entry {}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        // A min-heap on distance, then column.
        other.0.total_cmp(&self.0).then(other.1.cmp(&self.1))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Assign {
    /// Starts a problem with `columns` columns and no rows.
    pub fn clear(&mut self, columns: usize) {
        self.edges.clear();
        self.rows.clear();
        self.columns = columns;
    }

    /// Adds a row that costs `way_out` if left unassigned; its edges follow ([`Assign::edge`]).
    /// Returns its index.
    pub fn row(&mut self, way_out: f64) -> usize {
        self.rows.push((self.edges.len(), way_out.max(0.0)));
        self.rows.len() - 1
    }

    /// Adds an edge from the last row added to `column` (`< columns`) at `cost` (`≥ 0`).
    pub fn edge(&mut self, column: usize, cost: f64) {
        debug_assert!(column < self.columns);
        self.edges.push((column as u32, cost.max(0.0)));
    }

    /// Solves the problem: each row's column, or [`NONE`] for its way out.
    pub fn solve(&mut self) -> &[u32] {
        let (n, m) = (self.rows.len(), self.columns);
        // Columns `m..m + n` are the rows' ways out.
        let width = m + n;
        self.row_col.clear();
        self.row_col.resize(n, NONE);
        self.col_row.clear();
        self.col_row.resize(width, NONE);
        self.u.clear();
        self.u.resize(n, 0.0);
        self.v.clear();
        self.v.resize(width, 0.0);
        self.dist.clear();
        self.dist.resize(width, f64::INFINITY);
        self.pred.clear();
        self.pred.resize(width, NONE);
        self.done.clear();
        self.done.resize(width, false);
        for s in 0..n {
            self.augment(s, m);
        }
        for c in self.row_col.iter_mut() {
            if *c as usize >= m {
                *c = NONE;
            }
        }
        &self.row_col
    }

    /// Adds row `s` by one shortest augmenting path.
    fn augment(&mut self, s: usize, m: usize) {
        self.heap.clear();
        self.settled.clear();
        self.touched.clear();
        let relax = |this: &mut Self, r: usize, base: f64| {
            let way_out = m + r;
            let edges = this.rows[r].0..this.rows.get(r + 1).map_or(this.edges.len(), |x| x.0);
            let out = std::iter::once((way_out, this.rows[r].1));
            for (c, w) in edges
                .map(|k| (this.edges[k].0 as usize, this.edges[k].1))
                .chain(out)
            {
                if this.done[c] {
                    continue;
                }
                let d = base + w - this.u[r] - this.v[c];
                if d < this.dist[c] {
                    if this.dist[c] == f64::INFINITY {
                        this.touched.push(c as u32);
                    }
                    this.dist[c] = d;
                    this.pred[c] = r as u32;
                    this.heap.push(Entry(d, c as u32));
                }
            }
        };
        relax(self, s, 0.0);
        let (end, total) = loop {
            let Some(Entry(d, c)) = self.heap.pop() else {
                // Unreachable: the row's own way out is always free.
                return;
            };
            let c = c as usize;
            if d > self.dist[c] || self.done[c] {
                continue;
            }
            let owner = self.col_row[c];
            if owner == NONE {
                break (c, d);
            }
            self.settled.push(c as u32);
            self.done[c] = true;
            relax(self, owner as usize, d);
        };
        // Potentials: reduced costs stay non-negative, and tight along the path.
        self.u[s] += total;
        for &c in &self.settled {
            let c = c as usize;
            let slack = total - self.dist[c];
            self.v[c] -= slack;
            let r = self.col_row[c] as usize;
            self.u[r] += slack;
        }
        // Flip the path.
        let mut c = end;
        loop {
            let r = self.pred[c] as usize;
            let previous = self.row_col[r];
            self.row_col[r] = c as u32;
            self.col_row[c] = r as u32;
            if r == s {
                break;
            }
            c = previous as usize;
        }
        for &c in &self.touched {
            self.dist[c as usize] = f64::INFINITY;
            self.pred[c as usize] = NONE;
        }
        for &c in &self.settled {
            self.done[c as usize] = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every assignment's cost by brute force: the least.
    fn brute(rows: &[(f64, Vec<(usize, f64)>)], m: usize) -> f64 {
        fn go(i: usize, rows: &[(f64, Vec<(usize, f64)>)], used: &mut Vec<bool>) -> f64 {
            let Some((out, edges)) = rows.get(i) else {
                return 0.0;
            };
            let mut best = out + go(i + 1, rows, used);
            for &(c, w) in edges {
                if !used[c] {
                    used[c] = true;
                    best = best.min(w + go(i + 1, rows, used));
                    used[c] = false;
                }
            }
            best
        }
        go(0, rows, &mut vec![false; m])
    }

    fn solve(rows: &[(f64, Vec<(usize, f64)>)], m: usize) -> (Vec<u32>, f64) {
        let mut a = Assign::default();
        a.clear(m);
        for (out, edges) in rows {
            a.row(*out);
            for &(c, w) in edges {
                a.edge(c, w);
            }
        }
        let got = a.solve().to_vec();
        let mut cost = 0.0;
        let mut used = vec![false; m];
        for (r, &c) in got.iter().enumerate() {
            if c == NONE {
                cost += rows[r].0;
            } else {
                assert!(!used[c as usize], "column {c} assigned twice");
                used[c as usize] = true;
                cost += rows[r]
                    .1
                    .iter()
                    .filter(|e| e.0 == c as usize)
                    .map(|e| e.1)
                    .fold(f64::INFINITY, f64::min);
            }
        }
        (got, cost)
    }

    #[test]
    fn a_later_row_displaces_an_earlier_one() {
        // Row 0 prefers column 0 a little; row 1 can only use column 0: row 0 moves to 1.
        let rows = vec![(10.0, vec![(0, 1.0), (1, 1.5)]), (10.0, vec![(0, 1.0)])];
        let (got, cost) = solve(&rows, 2);
        assert_eq!(got, vec![1, 0]);
        assert!((cost - 2.5).abs() < 1e-9);
    }

    #[test]
    fn a_row_takes_its_way_out_when_cheaper() {
        let rows = vec![(10.0, vec![(0, 1.0)]), (0.5, vec![(0, 1.0)])];
        let (got, _) = solve(&rows, 1);
        assert_eq!(got, vec![0, NONE]);
    }

    proptest! {
        #[test]
        fn least_cost(
            rows in prop::collection::vec(
                (0.0f64..20.0, prop::collection::vec((0usize..6, 0.0f64..20.0), 0..5)),
                0..7,
            )
        ) {
            let (_, cost) = solve(&rows, 6);
            let best = brute(&rows, 6);
            prop_assert!((cost - best).abs() < 1e-6, "cost {} least {}", cost, best);
        }
    }
}
