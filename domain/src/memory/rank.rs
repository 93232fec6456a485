//! Ranking: Reciprocal Rank Fusion of the keyword and vector lists, then
//! multiplicative boosts, capped together at [`MAX_BOOST`].
//!
//! - RRF: `Σ 1 / (k + rank)` over the lists a memory appears in, k = 60,
//!   ranks 1-based. It is normalised by the best score possible with the
//!   lists that answered (2/61 with both, 1/61 with one), so a fused score
//!   is in (0, 1] whether or not the embedder was up.
//! - Score boost: `1 + 0.3 × (s − 0.5)`, s being the learned score for
//!   outcome-scored tiers and importance × confidence for `MEMORY_BANK` and
//!   `DOCUMENTS` (which outcomes never change). Range 0.85–1.15.
//! - Tier boost: `PATTERNS` 1.15, `MEMORY_BANK` 1.10, `HISTORY` 1.05,
//!   `WORKING` and `DOCUMENTS` 1.0 — proven facts first, all else equal.
//! - Graph boost: `1 + min(0.5, 0.25 × n)`, n being the knowledge-graph
//!   entities the memory is about or mentions whose name (or key) appears in
//!   the query.
//! - The product of the three is capped at 1.5 (DESIGN.md §7).

use std::collections::HashMap;

use brainstem_entity::MemoryId;

use super::Tier;

pub const RRF_K: f64 = 60.0;
pub const MAX_BOOST: f64 = 1.5;

/// A candidate after fusion.
#[derive(Clone, Debug, PartialEq)]
pub struct Fused {
    pub id: MemoryId,
    /// 1-based rank in the keyword list, if it was there.
    pub keyword_rank: Option<usize>,
    /// 1-based rank in the vector list, if it was there.
    pub vector_rank: Option<usize>,
    pub vector_similarity: Option<f32>,
    /// Normalised RRF score in (0, 1].
    pub fused: f64,
}

/// Fuse two ranked lists. `lists_answered` is how many legs ran (1 or 2).
pub fn rrf(keyword: &[MemoryId], vector: &[(MemoryId, f32)], lists_answered: usize) -> Vec<Fused> {
    let mut by_id: HashMap<MemoryId, Fused> = HashMap::new();
    for (i, id) in keyword.iter().enumerate() {
        let entry = by_id.entry(*id).or_insert_with(|| empty(*id));
        if entry.keyword_rank.is_none() {
            entry.keyword_rank = Some(i + 1);
        }
    }
    for (i, (id, sim)) in vector.iter().enumerate() {
        let entry = by_id.entry(*id).or_insert_with(|| empty(*id));
        if entry.vector_rank.is_none() {
            entry.vector_rank = Some(i + 1);
            entry.vector_similarity = Some(*sim);
        }
    }
    let best = lists_answered.max(1) as f64 / (RRF_K + 1.0);
    let mut fused: Vec<Fused> = by_id
        .into_values()
        .map(|mut f| {
            let raw: f64 = [f.keyword_rank, f.vector_rank]
                .into_iter()
                .flatten()
                .map(|r| 1.0 / (RRF_K + r as f64))
                .sum();
            f.fused = raw / best;
            f
        })
        .collect();
    fused.sort_by(|a, b| b.fused.total_cmp(&a.fused).then(a.id.cmp(&b.id)));
    fused
}

fn empty(id: MemoryId) -> Fused {
    Fused {
        id,
        keyword_rank: None,
        vector_rank: None,
        vector_similarity: None,
        fused: 0.0,
    }
}

pub fn score_boost(tier: Tier, score: f64, importance: f64, confidence: f64) -> f64 {
    let s = if tier.is_outcome_scored() {
        score
    } else {
        importance * confidence
    };
    1.0 + 0.3 * (s.clamp(0.0, 1.0) - 0.5)
}

pub fn tier_boost(tier: Tier) -> f64 {
    match tier {
        Tier::Patterns => 1.15,
        Tier::MemoryBank => 1.10,
        Tier::History => 1.05,
        Tier::Working | Tier::Documents => 1.0,
    }
}

pub fn graph_boost(matched_entities: usize) -> f64 {
    1.0 + (0.25 * matched_entities as f64).min(0.5)
}

/// The product of the boosts, capped at [`MAX_BOOST`].
pub fn combined(score: f64, tier: f64, graph: f64) -> f64 {
    (score * tier * graph).min(MAX_BOOST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rrf_uses_k_60_and_one_based_ranks() {
        let a = MemoryId::new();
        let b = MemoryId::new();
        let c = MemoryId::new();
        let fused = rrf(&[a, b], &[(b, 0.9), (c, 0.5)], 2);
        assert_eq!(fused[0].id, b, "in both lists, so first");
        let best = 2.0 / 61.0;
        assert!((fused[0].fused - (1.0 / 62.0 + 1.0 / 61.0) / best).abs() < 1e-12);
        assert_eq!(fused[0].keyword_rank, Some(2));
        assert_eq!(fused[0].vector_rank, Some(1));
        // a (keyword rank 1) and c (vector rank 2) tie on raw RRF? No: 1/61 > 1/62.
        assert_eq!(fused[1].id, a);
        assert_eq!(fused[2].id, c);
        // One list only: the top item scores exactly 1.
        let single = rrf(&[a], &[], 1);
        assert!((single[0].fused - 1.0).abs() < 1e-12);
    }

    #[test]
    fn boosts_are_capped_at_one_and_a_half() {
        let s = score_boost(Tier::Patterns, 1.0, 0.0, 0.0);
        assert!((s - 1.15).abs() < 1e-12);
        let total = combined(s, tier_boost(Tier::Patterns), graph_boost(5));
        assert!((total - MAX_BOOST).abs() < 1e-12);
        assert!((graph_boost(1) - 1.25).abs() < 1e-12);
        // MEMORY_BANK ranks by importance × confidence, not by outcomes.
        assert!((score_boost(Tier::MemoryBank, 0.0, 1.0, 1.0) - 1.15).abs() < 1e-12);
    }
}
