//! Brainstem benchmarks. Each binary in `src/bin/` measures one area against
//! a real store and prints its figures; `BENCHMARKS.md` records runs.
//!
//! - `memory`: bulk load, hybrid search latency, vector-leg recall and
//!   filtered-HNSW completeness on PostgreSQL + pgvector.
