//! One line of a JSON Lines memory import file, read as an [`ImportItem`].
//!
//! A line is a JSON object with the fields of GraphQL's `ImportMemoryItem`
//! (camelCase: `key`, `content`, `tier`, `category`, `subjectId`,
//! `mentionIds`, `importance`, `confidence`, `sourceTaskId`, `validFrom`,
//! `supersedesId`); ids are the API's global ids.
//!
//! Invariants:
//! - Reading never fails the file: a line that is not JSON, not an object
//!   of those fields (an unknown field included, so that a misspelt one
//!   is not dropped silently), or names a malformed id becomes an item
//!   whose `memory` is that error, which the import reports as the line's
//!   `FAILED` outcome. Values are checked by [`Memories::import`]
//!   (`super::Memories::import`), as for any item.
//! - A line without a key gets the one the job derives for it, so that the
//!   line is imported once however often its batch runs.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use uuid::Uuid;

use super::{ImportItem, NewMemory, Tier};
use crate::{EntityId, Error, MemoryId, Result, kernel::page::global_id_of};

/// A line as it is written.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Line {
    key: Option<String>,
    content: String,
    tier: Option<String>,
    category: Option<String>,
    subject_id: Option<String>,
    mention_ids: Option<Vec<String>>,
    importance: Option<f64>,
    confidence: Option<f64>,
    source_task_id: Option<Uuid>,
    valid_from: Option<DateTime<Utc>>,
    supersedes_id: Option<String>,
}

/// Line `line_no` of a file as an import item; `derived_key` is its key
/// when the line names none.
pub(crate) fn read(line_no: i64, text: &str, derived_key: String) -> ImportItem {
    let line: Line = match serde_json::from_str(text) {
        Ok(line) => line,
        Err(err) => {
            return ImportItem {
                key: None,
                memory: Err(Error::validation(format!(
                    "line {line_no} is not a memory: {err}"
                ))),
            };
        }
    };
    let key = Some(line.key.clone().unwrap_or(derived_key));
    ImportItem {
        key,
        memory: memory(line).map_err(|err| match err {
            Error::Validation(m) => Error::validation(format!("line {line_no}: {m}")),
            other => other,
        }),
    }
}

fn memory(line: Line) -> Result<NewMemory> {
    let entity = |id: &String| global_id_of(id, "KgEntity").map(EntityId::from);
    let tier = line
        .tier
        .as_deref()
        .map(|t| {
            Tier::parse(t).map_err(|_| {
                Error::validation(format!(
                    "`tier` must be one of {}, not `{t}`",
                    Tier::ALL.map(Tier::as_str).join(", ")
                ))
            })
        })
        .transpose()?;
    Ok(NewMemory {
        subject: line.subject_id.as_ref().map(entity).transpose()?,
        mentions: line
            .mention_ids
            .unwrap_or_default()
            .iter()
            .map(entity)
            .collect::<Result<Vec<_>>>()?,
        supersedes: line
            .supersedes_id
            .as_ref()
            .map(|id| global_id_of(id, "Memory").map(MemoryId::from))
            .transpose()?,
        content: line.content,
        tier,
        category: line.category,
        importance: line.importance,
        confidence: line.confidence,
        source_task: line.source_task_id,
        valid_from: line.valid_from,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::page::global_id;

    #[test]
    fn a_line_reads_as_the_item_it_names() {
        let entity = Uuid::now_v7();
        let text = serde_json::json!({
            "key": "k-1", "content": "Prefers tea", "tier": "MEMORY_BANK",
            "subjectId": global_id("KgEntity", entity), "importance": 0.9,
        })
        .to_string();
        let item = read(3, &text, "job:x:3".into());
        assert_eq!(item.key.as_deref(), Some("k-1"));
        let memory = item.memory.unwrap();
        assert_eq!(memory.content, "Prefers tea");
        assert_eq!(memory.tier, Some(Tier::MemoryBank));
        assert_eq!(memory.subject, Some(EntityId::from(entity)));
        assert_eq!(memory.importance, Some(0.9));
    }

    #[test]
    fn a_line_without_a_key_takes_the_derived_one() {
        let item = read(7, r#"{"content": "x"}"#, "job:j:7".into());
        assert_eq!(item.key.as_deref(), Some("job:j:7"));
    }

    #[test]
    fn bad_lines_are_the_lines_errors_with_their_number() {
        for (text, needle) in [
            ("{not json", "line 4 is not a memory"),
            (
                r#"{"content": "x", "colour": "red"}"#,
                "unknown field `colour`",
            ),
            (r#"{"tier": "WORKING"}"#, "missing field `content`"),
            (
                r#"{"content": "x", "tier": "HOT"}"#,
                "`tier` must be one of",
            ),
            (
                r#"{"content": "x", "subjectId": "nope"}"#,
                "is not a valid id",
            ),
        ] {
            let err = read(4, text, "k".into()).memory.unwrap_err();
            assert!(matches!(err, Error::Validation(_)), "{text}: {err:?}");
            assert!(err.to_string().contains(needle), "{text}: {err}");
            assert!(err.to_string().contains("line 4"), "{text}: {err}");
        }
    }
}
