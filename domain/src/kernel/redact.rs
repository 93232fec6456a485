//! PII redaction. Values under keys that name personal data are replaced
//! before anything is logged, summarised or written to the audit log.

use serde_json::Value;

/// Keys (compared case-insensitively, ignoring `-` and `_`) whose values are
/// never stored or logged in clear.
const PII_KEYS: &[&str] = &[
    "ssn",
    "socialsecuritynumber",
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "authorization",
    "dob",
    "dateofbirth",
    "birthdate",
    "creditcard",
    "cardnumber",
    "cvv",
    "iban",
    "accountnumber",
    "passport",
    "taxid",
];

pub const REDACTED: &str = "[REDACTED]";

/// Whether a key names personal or secret data.
pub fn is_pii_key(key: &str) -> bool {
    let normalized: String = key
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect();
    PII_KEYS.contains(&normalized.as_str())
}

/// A copy of `value` with PII values replaced, at every depth.
pub fn redact(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if is_pii_key(k) {
                        Value::String(REDACTED.to_owned())
                    } else {
                        redact(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn redacts_pii_keys_at_every_depth() {
        let input = json!({
            "name": "Ada",
            "SSN": "123-45-6789",
            "profile": {"date_of_birth": "1815-12-10", "city": "London"},
            "accounts": [{"api_key": "k", "id": 1}]
        });
        let out = redact(&input);
        assert_eq!(out["name"], "Ada");
        assert_eq!(out["SSN"], REDACTED);
        assert_eq!(out["profile"]["date_of_birth"], REDACTED);
        assert_eq!(out["profile"]["city"], "London");
        assert_eq!(out["accounts"][0]["api_key"], REDACTED);
        assert_eq!(out["accounts"][0]["id"], 1);
    }
}
