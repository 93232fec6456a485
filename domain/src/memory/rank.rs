//! Ranking: the vector leg's similarity plus a small bonus for keyword
//! evidence, then multiplicative boosts, capped together at [`MAX_BOOST`].
//!
//! - Fusion ([`fuse`]): a memory's fused score is
//!   `((1 + cosine) / 2 + W × coverage) / (1 + W)`, W = [`KEYWORD_WEIGHT`]:
//!   its closeness by the vector leg, plus how much of the query it covers
//!   by words, weighted by their rarity ([`super::keyword::coverages`]),
//!   which counts only for keyword hits covering at least
//!   [`KEYWORD_FLOOR`]. A keyword hit the vector leg did not return is given
//!   the lowest similarity that leg returned (its own is at most that).
//! - So the vectors decide, and words break near-ties: a memory that has
//!   the query's rare words (a name, a code) moves past ones the vectors
//!   find about as close, not past one they find clearly closer. A query
//!   with no keyword hit above the floor ranks exactly as the vector leg
//!   does.
//! - Why not Reciprocal Rank Fusion (k = 60), used before: ranks throw away
//!   how far apart the candidates are, and the keyword leg's order among
//!   memories sharing one name is noise. On the labelled set
//!   `tests/fixtures/memory_questions.json` RRF ranked below the MiniLM
//!   vector leg with every weighting tried (or, weighted to match it, no
//!   better than the keyword leg with the hashing embedder). W and the
//!   floor were chosen on that set and `tests/fixtures/memory_corpus.json`
//!   (README, "How fusion ranks", has the figures).
//! - One leg only (`SearchMode`, or the embedder down): the vector leg's
//!   `(1 + cosine) / 2`, or the keyword leg's `1 / rank`.
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

pub const MAX_BOOST: f64 = 1.5;
/// How much keyword evidence counts against closeness by vectors.
pub const KEYWORD_WEIGHT: f64 = 0.15;
/// Keyword hits covering less of the query than this do not count.
pub const KEYWORD_FLOOR: f64 = 0.2;

/// A keyword hit: the memory and how much of the query it covers.
pub type KeywordHit = (MemoryId, f64);

/// A candidate after fusion.
#[derive(Clone, Debug, PartialEq)]
pub struct Fused {
    pub id: MemoryId,
    /// 1-based rank in the keyword list, if it counted.
    pub keyword_rank: Option<usize>,
    /// 1-based rank in the vector list, if it was there.
    pub vector_rank: Option<usize>,
    pub vector_similarity: Option<f32>,
    /// Normalised fused score in [0, 1].
    pub fused: f64,
}

/// Fuse the legs that ran (`None`: that leg did not run). Keyword hits are
/// best first, with their coverage; those below [`KEYWORD_FLOOR`] are
/// dropped when the vector leg ran.
pub fn fuse(keyword: Option<&[KeywordHit]>, vector: Option<&[(MemoryId, f32)]>) -> Vec<Fused> {
    let keyword: Vec<KeywordHit> = match (keyword, vector) {
        (None, _) => Vec::new(),
        (Some(k), None) => k.to_vec(),
        (Some(k), Some(_)) => k
            .iter()
            .filter(|(_, coverage)| *coverage >= KEYWORD_FLOOR)
            .copied()
            .collect(),
    };
    let mut by_id: HashMap<MemoryId, Fused> = HashMap::new();
    for (i, (id, sim)) in vector.unwrap_or_default().iter().enumerate() {
        by_id.entry(*id).or_insert(Fused {
            id: *id,
            keyword_rank: None,
            vector_rank: Some(i + 1),
            vector_similarity: Some(*sim),
            fused: 0.0,
        });
    }
    let coverage: HashMap<MemoryId, f64> = keyword.iter().copied().collect();
    for (i, (id, _)) in keyword.iter().enumerate() {
        let entry = by_id.entry(*id).or_insert(Fused {
            id: *id,
            keyword_rank: None,
            vector_rank: None,
            vector_similarity: None,
            fused: 0.0,
        });
        if entry.keyword_rank.is_none() {
            entry.keyword_rank = Some(i + 1);
        }
    }
    let lowest = vector
        .unwrap_or_default()
        .iter()
        .map(|(_, s)| f64::from(*s))
        .fold(None, |low: Option<f64>, s| {
            Some(low.map_or(s, |l| l.min(s)))
        });
    let mut fused: Vec<Fused> = by_id
        .into_values()
        .map(|mut f| {
            f.fused = match vector {
                None => f.keyword_rank.map_or(0.0, |r| 1.0 / r as f64),
                Some(_) => {
                    let words = f
                        .keyword_rank
                        .and_then(|_| coverage.get(&f.id).copied())
                        .unwrap_or(0.0);
                    let sim = f
                        .vector_similarity
                        .map(f64::from)
                        .or(lowest)
                        .unwrap_or(-1.0);
                    let closeness = (1.0 + sim.clamp(-1.0, 1.0)) / 2.0;
                    (closeness + KEYWORD_WEIGHT * words) / (1.0 + KEYWORD_WEIGHT)
                }
            };
            f
        })
        .collect();
    fused.sort_by(|a, b| b.fused.total_cmp(&a.fused).then(a.id.cmp(&b.id)));
    fused
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
    fn vectors_decide_and_words_break_near_ties() {
        let a = MemoryId::new();
        let b = MemoryId::new();
        let c = MemoryId::new();
        // a and b about equally close: the keyword hit b moves first.
        let fused = fuse(Some(&[(b, 1.0)]), Some(&[(a, 0.61), (b, 0.60), (c, 0.2)]));
        assert_eq!(fused[0].id, b);
        assert_eq!(fused[0].keyword_rank, Some(1));
        let best = (0.8 + KEYWORD_WEIGHT) / (1.0 + KEYWORD_WEIGHT);
        assert!((fused[0].fused - best).abs() < 1e-6, "{}", fused[0].fused);
        // c is clearly further: words do not lift it past a.
        let fused = fuse(Some(&[(c, 1.0)]), Some(&[(a, 0.61), (b, 0.60), (c, 0.2)]));
        assert_eq!(fused[0].id, a);
        // Hits below the floor do not count, so the vector order is kept.
        let fused = fuse(Some(&[(b, 0.1)]), Some(&[(a, 0.61), (b, 0.60)]));
        assert_eq!(fused.iter().map(|f| f.id).collect::<Vec<_>>(), vec![a, b]);
        assert_eq!(fused[1].keyword_rank, None);
        // A keyword hit the vectors missed gets their lowest similarity.
        let fused = fuse(Some(&[(c, 0.5)]), Some(&[(a, 0.9), (b, 0.3)]));
        assert_eq!(
            fused.iter().map(|f| f.id).collect::<Vec<_>>(),
            vec![a, c, b]
        );
        // Keyword only: every hit counts, the first scores 1.
        let fused = fuse(Some(&[(a, 0.1), (b, 0.1)]), None);
        assert_eq!(fused[0].id, a);
        assert!((fused[0].fused - 1.0).abs() < 1e-12);
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
