//! Plans' intent patterns: their limits, checked when a plan is published,
//! and their compiled form, built once per plan version and kept in a
//! bounded cache that intent detection reads.
//!
//! Invariants:
//! - A published plan has at most [`MAX_PATTERNS`] patterns of at most
//!   [`MAX_PATTERN_CHARS`] characters each, and they compile (together,
//!   case-insensitively) within [`MAX_COMPILED_BYTES`]. Compiling a
//!   case-insensitive Unicode regular expression can take tens of
//!   milliseconds; these bounds keep one plan's compile short and done
//!   once, not once per task.
//! - A cache entry is the compiled set of one plan version, found by the
//!   plan's id and checked against its patterns, so a stale entry is never
//!   used. The cache holds at most [`CACHE_PLANS`] versions; when full it
//!   starts over (a plan version then compiles once more).
//! - A stored plan that predates the limits still works: its patterns are
//!   compiled under the same size limit, and if they do not fit, the plan
//!   matches no text (and a warning is logged once per compile).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use regex::{RegexSet, RegexSetBuilder};

use brainstem_entity::PlanId;

use crate::{catalogue::plans::Plan, kernel::metrics::metrics};

/// Patterns one plan may declare.
pub const MAX_PATTERNS: usize = 32;
/// Characters in one pattern.
pub const MAX_PATTERN_CHARS: usize = 200;
/// The compiled size of one plan's patterns (the `regex` crate's
/// `size_limit`; its lazy DFA gets the same).
pub const MAX_COMPILED_BYTES: usize = 1 << 20;
/// Plan versions whose compiled patterns are kept.
pub const CACHE_PLANS: usize = 256;

fn compile(patterns: &[String]) -> Result<RegexSet, regex::Error> {
    RegexSetBuilder::new(patterns)
        .case_insensitive(true)
        .size_limit(MAX_COMPILED_BYTES)
        .dfa_size_limit(MAX_COMPILED_BYTES)
        .build()
}

/// The integrity check of a plan's patterns: every problem found, each
/// naming the plan.
pub fn check(plan_key: &str, patterns: &[String]) -> Vec<String> {
    let mut errors = Vec::new();
    if patterns.len() > MAX_PATTERNS {
        errors.push(format!(
            "plan `{plan_key}`: {} patterns, at most {MAX_PATTERNS} are allowed",
            patterns.len()
        ));
        return errors;
    }
    for pattern in patterns {
        let chars = pattern.chars().count();
        if chars > MAX_PATTERN_CHARS {
            errors.push(format!(
                "plan `{plan_key}`: a pattern of {chars} characters, at most {MAX_PATTERN_CHARS} are allowed"
            ));
        } else if let Err(e) = compile(std::slice::from_ref(pattern)) {
            errors.push(format!(
                "plan `{plan_key}`: pattern `{pattern}` is invalid: {e}"
            ));
        }
    }
    if errors.is_empty()
        && let Err(e) = compile(patterns)
    {
        errors.push(format!(
            "plan `{plan_key}`: its patterns together are too large to compile: {e}"
        ));
    }
    errors
}

/// One plan version's compiled patterns.
pub struct Compiled {
    /// The source, to tell a stale entry.
    patterns: Vec<String>,
    /// `None` when they do not compile within the limits.
    set: Option<RegexSet>,
}

impl Compiled {
    /// How many of the patterns match `text`.
    pub fn hits(&self, text: &str) -> usize {
        self.set
            .as_ref()
            .map_or(0, |set| set.matches(text).iter().count())
    }
}

/// The compiled patterns of recent plan versions (see the module docs).
#[derive(Clone, Default)]
pub struct PatternCache {
    entries: Arc<Mutex<HashMap<PlanId, Arc<Compiled>>>>,
}

impl PatternCache {
    /// The compiled patterns of `plan`, compiling them on first use.
    pub fn get(&self, plan: &Plan) -> Arc<Compiled> {
        if let Ok(entries) = self.entries.lock()
            && let Some(found) = entries.get(&plan.id)
            && found.patterns == plan.patterns
        {
            return found.clone();
        }
        // Compiled outside the lock: another task may compile the same
        // plan meanwhile; the later insert wins, both are correct.
        let set = match compile(&plan.patterns) {
            Ok(set) => Some(set),
            Err(e) => {
                tracing::warn!(plan = %plan.key, version = plan.version, error = %e,
                    "a stored plan's intent patterns do not compile within the limits; it matches no text");
                None
            }
        };
        metrics().intent_pattern_compilations.inc();
        let compiled = Arc::new(Compiled {
            patterns: plan.patterns.clone(),
            set,
        });
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= CACHE_PLANS {
                entries.clear();
            }
            entries.insert(plan.id, compiled.clone());
        }
        compiled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limits_are_checked() {
        let ok: Vec<String> = vec!["loss run".into(), "dec(laration)? page".into()];
        assert!(check("p", &ok).is_empty());
        let many: Vec<String> = (0..=MAX_PATTERNS).map(|i| format!("w{i}")).collect();
        assert!(check("p", &many)[0].contains("at most 32"));
        let long = vec!["a".repeat(MAX_PATTERN_CHARS + 1)];
        assert!(check("p", &long)[0].contains("at most 200"));
        let huge = vec![r"\w{500}\w{500}".to_owned()];
        assert!(
            check("p", &huge)[0].contains("invalid"),
            "{:?}",
            check("p", &huge)
        );
        let broken = vec!["(".to_owned()];
        assert!(check("p", &broken)[0].contains("invalid"));
    }
}
