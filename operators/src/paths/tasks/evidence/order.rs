//! The order prior ([`order_log_prior`]): in which order a node takes up the tasks waiting
//! for the same step. Not learned here, and no state: the linker compares the likelihood of
//! its warm-up under each `rho`.

/// The order prior: the log-probability that a departure is taken up by the task of rank
/// `rank` (0 the longest waiting) among `n` candidate tasks, when a node takes up waiting
/// tasks in order of arrival with odds `rho` against each later one (a truncated geometric
/// distribution). `rho = 1` is no preference (`−ln n`, the cost of naming one of `n`); a
/// first-come-first-served node (a single event loop) is `rho` near 0. Which `rho` fits a
/// system is learned by comparing the likelihood of the whole warm-up under each.
pub fn order_log_prior(rho: f64, rank: usize, n: usize) -> f64 {
    let n = n.max(1);
    if rho >= 0.999 {
        return -(n as f64).ln();
    }
    let norm = 1.0 - rho.powi(n as i32);
    ((1.0 - rho) * rho.powi(rank as i32) / norm).ln()
}
