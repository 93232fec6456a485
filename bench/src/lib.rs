//! Brainstem benchmarks. Each binary in `src/bin/` measures one area against
//! a real store and prints its figures; `BENCHMARKS.md` records runs.
//!
//! - `memory`: bulk load, hybrid search latency, vector-leg recall and
//!   filtered-HNSW completeness on PostgreSQL + pgvector.
//! - `executor`: task throughput and latency on SQLite and PostgreSQL.
//! - `subscribers`: WebSocket fan-out latency and memory per subscription.

use std::time::Duration;

/// Percentile of a sorted list of durations (`p` in 0–100).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
