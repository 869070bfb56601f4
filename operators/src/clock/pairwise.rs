//! Weighted least squares from pairwise differences: values `x_k` of the nodes of a graph,
//! relative to one reference node (`x_ref = 0`), from edges that each measure `x_b − x_a`
//! with a weight. `clock` makes its domains' offsets and drifts mutually consistent with it
//! (WAP5 §5.2 gives one offset per pair; over a graph of domains the pairs must agree).
//!
//! - **Algorithm**: the normal equations are the graph's weighted Laplacian with the
//!   reference's row and column removed, symmetric positive definite on the nodes connected
//!   to the reference. They are solved by sparse Gaussian elimination without pivoting
//!   (stable for positive definite systems), eliminating a node of fewest remaining
//!   neighbours first (minimum degree), then back-substituting. Eliminating a node adds
//!   edges between its neighbours only, so a graph of many clients that each talk to a few
//!   servers (a message trace whose every host is a clock domain) costs about the sum of the
//!   squared degrees of the clients, where dense elimination cost the cube of the node
//!   count: on Project 5's parallelism-45 trace, 647 client hosts made the dense solve,
//!   once per second boundary, 43% of the run's CPU.
//! - **State**: none between calls.
//! - **Determinism**: nodes are numbered in order of first appearance (the reference first),
//!   ties in degree go to the lower number and neighbours are visited in number order, so
//!   the same edges in the same order give the same bits.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;

/// An eliminated node's row as elimination left it: its pivot, its two right-hand sides and
/// its neighbours then, for back-substitution (`None` in its place: singular).
type Pivot = (f64, [f64; 2], Vec<(usize, f64)>);

/// The values of every node connected to `reference`, which is 0, by weighted least squares
/// over `edges`: `(a, b, values, weight)` measures `x_b − x_a = values` (two right-hand sides
/// at once: `clock`'s offsets and drifts share the edges and the weights, so one elimination
/// serves both, and each comes out exactly as it would alone). Weights should be positive;
/// an edge from a node to itself says nothing. A node whose system is singular (no positive
/// weight connects it) is left out.
pub fn solve<K: Clone + Eq + Hash + Ord>(
    reference: &K,
    edges: &[(K, K, [f64; 2], f64)],
) -> BTreeMap<K, [f64; 2]> {
    // Number the nodes, the reference 0.
    let mut index: HashMap<&K, usize> = HashMap::new();
    let mut nodes: Vec<&K> = vec![reference];
    index.insert(reference, 0);
    let mut numbered = Vec::with_capacity(edges.len());
    for (a, b, values, w) in edges {
        let [ia, ib] = [a, b].map(|k| match index.get(k) {
            Some(&i) => i,
            None => {
                index.insert(k, nodes.len());
                nodes.push(k);
                nodes.len() - 1
            }
        });
        if ia != ib {
            numbered.push((ia, ib, *values, *w));
        }
    }
    let n = nodes.len();
    // The nodes connected to the reference.
    let mut adjacent: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(a, b, _, _) in &numbered {
        adjacent[a].push(b);
        adjacent[b].push(a);
    }
    let mut reached = vec![false; n];
    reached[0] = true;
    let mut stack = vec![0];
    while let Some(k) = stack.pop() {
        for &j in &adjacent[k] {
            if !reached[j] {
                reached[j] = true;
                stack.push(j);
            }
        }
    }
    drop(adjacent);
    // The normal equations over the unknowns (the reached nodes but the reference): the
    // diagonal, the off-diagonal entries by row, and the two right-hand sides.
    let mut diagonal = vec![0.0f64; n];
    let mut rhs = vec![[0.0f64; 2]; n];
    let mut off: Vec<BTreeMap<usize, f64>> = vec![BTreeMap::new(); n];
    for &(a, b, values, w) in &numbered {
        if !reached[a] {
            continue;
        }
        // w · (x_b − x_a − value)², differentiated by x_b and by x_a.
        for (me, other, sign) in [(b, a, 1.0), (a, b, -1.0)] {
            if me == 0 {
                continue;
            }
            diagonal[me] += w;
            for (r, v) in rhs[me].iter_mut().zip(values) {
                *r += sign * w * v;
            }
            if other != 0 {
                *off[me].entry(other).or_default() -= w;
            }
        }
    }
    // Elimination, fewest neighbours first.
    let mut queue: BTreeSet<(usize, usize)> = (1..n)
        .filter(|&k| reached[k])
        .map(|k| (off[k].len(), k))
        .collect();
    let mut eliminated: Vec<(usize, Option<Pivot>)> = Vec::with_capacity(queue.len());
    while let Some((_, k)) = queue.pop_first() {
        let row = std::mem::take(&mut off[k]);
        let neighbours: Vec<(usize, f64)> = row.into_iter().collect();
        for &(i, _) in &neighbours {
            queue.remove(&(off[i].len(), i));
            off[i].remove(&k);
        }
        let p = diagonal[k];
        if p.abs() < 1e-30 {
            for &(i, _) in &neighbours {
                queue.insert((off[i].len(), i));
            }
            eliminated.push((k, None));
            continue;
        }
        let rk = rhs[k];
        for &(i, aik) in &neighbours {
            let f = aik / p;
            diagonal[i] -= f * aik;
            for (r, v) in rhs[i].iter_mut().zip(rk) {
                *r -= f * v;
            }
            for &(j, ajk) in &neighbours {
                if j != i {
                    *off[i].entry(j).or_default() -= f * ajk;
                }
            }
        }
        for &(i, _) in &neighbours {
            queue.insert((off[i].len(), i));
        }
        eliminated.push((k, Some((p, rk, neighbours))));
    }
    // Back-substitution, last eliminated first.
    let mut x: Vec<Option<[f64; 2]>> = vec![None; n];
    x[0] = Some([0.0, 0.0]);
    for (k, solved) in eliminated.into_iter().rev() {
        let Some((p, mut r, neighbours)) = solved else {
            continue;
        };
        for (i, aik) in neighbours {
            // A neighbour eliminated later that was singular counts as 0.
            let xi = x[i].unwrap_or([0.0, 0.0]);
            for (rv, xv) in r.iter_mut().zip(xi) {
                *rv -= aik * xv;
            }
        }
        x[k] = Some([r[0] / p, r[1] / p]);
    }
    nodes
        .into_iter()
        .zip(x)
        .filter_map(|(k, v)| v.map(|v| (k.clone(), v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dense solve `clock` used before (normal equations, Gauss–Jordan elimination with
    /// partial pivoting): the oracle.
    fn dense(reference: u32, edges: &[(u32, u32, [f64; 2], f64)]) -> BTreeMap<u32, [f64; 2]> {
        let mut reached = vec![reference];
        let mut grew = true;
        while grew {
            grew = false;
            for (a, b, _, _) in edges {
                for (x, y) in [(a, b), (b, a)] {
                    if reached.contains(x) && !reached.contains(y) {
                        reached.push(*y);
                        grew = true;
                    }
                }
            }
        }
        let unknowns: Vec<u32> = reached
            .iter()
            .filter(|d| **d != reference)
            .copied()
            .collect();
        let n = unknowns.len();
        let index: HashMap<u32, usize> =
            unknowns.iter().enumerate().map(|(i, d)| (*d, i)).collect();
        let mut m = vec![vec![0.0f64; n + 2]; n];
        for (a, b, values, w) in edges {
            if !(reached.contains(a) && reached.contains(b)) {
                continue;
            }
            let (ia, ib) = (index.get(a).copied(), index.get(b).copied());
            if let Some(i) = ib {
                m[i][i] += w;
                for (k, value) in values.iter().enumerate() {
                    m[i][n + k] += w * value;
                }
                if let Some(j) = ia {
                    m[i][j] -= w;
                }
            }
            if let Some(j) = ia {
                m[j][j] += w;
                for (k, value) in values.iter().enumerate() {
                    m[j][n + k] -= w * value;
                }
                if let Some(i) = ib {
                    m[j][i] -= w;
                }
            }
        }
        for col in 0..n {
            let pivot = (col..n)
                .max_by(|&x, &y| m[x][col].abs().total_cmp(&m[y][col].abs()))
                .unwrap_or(col);
            m.swap(col, pivot);
            let p = m[col][col];
            if p.abs() < 1e-30 {
                continue;
            }
            let pivot_row = m[col].clone();
            for (r, row) in m.iter_mut().enumerate() {
                if r != col {
                    let f = row[col] / p;
                    for (x, y) in row.iter_mut().zip(&pivot_row).skip(col) {
                        *x -= f * y;
                    }
                }
            }
        }
        let mut out = BTreeMap::new();
        out.insert(reference, [0.0, 0.0]);
        for (i, d) in unknowns.into_iter().enumerate() {
            if m[i][i].abs() > 1e-30 {
                out.insert(d, [m[i][n] / m[i][i], m[i][n + 1] / m[i][i]]);
            }
        }
        out
    }

    fn close(a: &BTreeMap<u32, [f64; 2]>, b: &BTreeMap<u32, [f64; 2]>) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|((ka, va), (kb, vb))| {
                ka == kb
                    && va
                        .iter()
                        .zip(vb)
                        .all(|(x, y)| (x - y).abs() <= 1e-6 * (1.0 + x.abs().max(y.abs())))
            })
    }

    #[test]
    fn consistent_differences_are_recovered_exactly_and_a_cycle_is_averaged() {
        // 1 = 0 + 5, 2 = 1 + 3, 3 unconnected; drifts 1 and 2.
        let edges = [
            (0, 1, [5.0, 1.0], 1.0),
            (1, 2, [3.0, 2.0], 1.0),
            (3, 4, [1.0, 0.0], 1.0),
        ];
        let got = solve(&0u32, &edges);
        assert_eq!(got.len(), 3);
        assert_eq!(got[&0], [0.0, 0.0]);
        assert!((got[&1][0] - 5.0).abs() < 1e-12 && (got[&1][1] - 1.0).abs() < 1e-12);
        assert!((got[&2][0] - 8.0).abs() < 1e-12 && (got[&2][1] - 3.0).abs() < 1e-12);
        // A triangle whose sides disagree by 3 (0→1 is 1, 1→2 is 1, 0→2 is 5): equal
        // weights share the error, each side off by 1.
        let triangle = [
            (0, 1, [1.0, 0.0], 1.0),
            (1, 2, [1.0, 0.0], 1.0),
            (0, 2, [5.0, 0.0], 1.0),
        ];
        let got = solve(&0u32, &triangle);
        assert!((got[&1][0] - 2.0).abs() < 1e-12, "{:?}", got);
        assert!((got[&2][0] - 4.0).abs() < 1e-12, "{:?}", got);
    }

    #[test]
    fn a_star_of_many_clients_solves_like_the_dense_elimination() {
        // Servers 0..6 in a mesh, 600 clients each talking to two web servers.
        let mut edges = Vec::new();
        for a in 0..6u32 {
            for b in a + 1..6 {
                edges.push((a, b, [f64::from(b - a) * 1e6, 0.5], 1.0 + f64::from(a)));
            }
        }
        for c in 6..606u32 {
            let off = f64::from(c) * 1e3;
            edges.push((c, 0, [-off + 7.0, 0.0], 0.25));
            edges.push((1, c, [off - 1e6 + 3.0, 1.0], 0.5));
        }
        let got = solve(&0u32, &edges);
        assert_eq!(got.len(), 606);
        assert!(close(&got, &dense(0, &edges)));
    }

    proptest::proptest! {
        #[test]
        fn solves_like_the_dense_elimination(
            edges in proptest::collection::vec(
                (0u32..12, 0u32..12, -1e9f64..1e9, -100f64..100.0, 0.01f64..100.0),
                0..40,
            ),
            reference in 0u32..12,
        ) {
            let edges: Vec<(u32, u32, [f64; 2], f64)> =
                edges.into_iter().map(|(a, b, v, d, w)| (a, b, [v, d], w)).collect();
            let got = solve(&reference, &edges);
            let want = dense(reference, &edges);
            proptest::prop_assert!(close(&got, &want), "{:?}\n{:?}", got, want);
        }
    }
}
