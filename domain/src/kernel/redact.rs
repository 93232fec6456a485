//! PII redaction. Values under keys that name personal or secret data are
//! replaced with `[REDACTED]` before anything is logged, summarised, stored
//! in an event or step, or written to the audit log, at every depth and
//! inside arrays.
//!
//! A key is read as words: `userEmail`, `user_email`, `User-Email` and
//! `USER_EMAIL` are all `user email`. It is sensitive when
//!
//! - a run of its words, joined, is one of [`ANYWHERE`] (`password_hash`,
//!   `clientSecret`, `creditCardNumber`, `x-api-key`, `date_of_birth`,
//!   `driver_license`, `fein`, …), or
//! - its last word is `token` (`token`, `access_token`, `authToken`).
//!
//! Inside an object under a key whose last word is `headers`, a key is a
//! header name and is judged more broadly ([`is_credential_header`]):
//! `Cookie`, `Set-Cookie`, `X-Auth…`, `X-Session…`, `Proxy-Authorization`
//! and any name containing `token`, `secret`, `key`, `auth`, `session`,
//! `signature`, `password` or `credential`.
//!
//! Secrets known by value (a credential a tool took from a connection) are
//! removed wherever they appear, in keys and values, with [`scrub`].
//!
//! This covers the specifications' 13 audit patterns (`password`,
//! `secret`, `token`, `api[_-]?key`, `credential`, `email`, `phone`,
//! `address`, `ssn`, `credit[_-]?card`, `_secret$`, `_token$`, `_key$`) and
//! the kernel's sensitive keys (`ssn`, `dob`, `password`, `driver_license`,
//! `fein`, `license_number`, `date_of_birth`), with two deliberate
//! narrowings, since the patterns match anywhere in a key: `token` must be
//! the last word, so counts such as `max_tokens` or `tokenCount` stay
//! readable; and `_key$` is read as the keys that are secrets (`api_key`,
//! `private_key`, `secret_key`, `access_key`, `signing_key`,
//! `encryption_key`, `license_key`), so identifiers such as `plan_key`,
//! `capability_key` or `idempotency_key` stay readable.

use serde_json::Value;

/// Sensitive wherever they stand in a key, as a whole word or a run of
/// words joined (`api` `key` → `apikey`).
const ANYWHERE: &[&str] = &[
    // Secrets.
    "password",
    "passwd",
    "passphrase",
    "secret",
    "credential",
    "credentials",
    "authorization",
    "apikey",
    "privatekey",
    "secretkey",
    "accesskey",
    "signingkey",
    "encryptionkey",
    "licensekey",
    "cookie",
    // Personal data.
    "email",
    "phone",
    "address",
    "ssn",
    "socialsecuritynumber",
    "dob",
    "dateofbirth",
    "birthdate",
    "driverlicense",
    "driverslicense",
    "licensenumber",
    "passport",
    "fein",
    "taxid",
    // Money.
    "creditcard",
    "cardnumber",
    "cvv",
    "cvc",
    "iban",
    "accountnumber",
];

/// Sensitive as the last word of a key.
const LAST: &[&str] = &["token"];

pub const REDACTED: &str = "[REDACTED]";

/// Whether a key names personal or secret data.
pub fn is_pii_key(key: &str) -> bool {
    let words = words(key);
    if words
        .last()
        .is_some_and(|last| LAST.contains(&last.as_str()))
    {
        return true;
    }
    (0..words.len()).any(|start| {
        let mut run = String::new();
        words[start..].iter().any(|word| {
            run.push_str(word);
            ANYWHERE.contains(&run.as_str())
        })
    })
}

/// The lowercase words of a key: split at anything not a letter or digit,
/// where a lowercase letter meets an uppercase one, and between letters and
/// digits (`apiKey2FA` → `api`, `key`, `2`, `fa`; `APIKey` → `apikey`).
fn words(key: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut previous: Option<char> = None;
    for c in key.chars() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            previous = None;
            continue;
        }
        let boundary = previous.is_some_and(|p| {
            (c.is_uppercase() && p.is_lowercase()) || (c.is_numeric() != p.is_numeric())
        });
        if boundary && !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        word.extend(c.to_lowercase());
        previous = Some(c);
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// Parts of a header name that mark its value as a credential.
const HEADER_PARTS: &[&str] = &[
    "token",
    "secret",
    "key",
    "auth",
    "session",
    "cookie",
    "signature",
    "password",
    "credential",
];

/// Whether a header's value is a credential (see the module's header).
pub fn is_credential_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    is_pii_key(name) || HEADER_PARTS.iter().any(|part| lower.contains(part))
}

/// A copy of `value` with PII values replaced, at every depth.
pub fn redact(value: &Value) -> Value {
    redact_with(value, is_pii_key)
}

fn redact_with(value: &Value, sensitive: fn(&str) -> bool) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if sensitive(k) {
                        Value::String(REDACTED.to_owned())
                    } else if words(k).last().is_some_and(|w| w == "headers") {
                        redact_with(v, is_credential_header)
                    } else {
                        redact(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| redact_with(item, sensitive))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `text` with every occurrence of each of `secrets` replaced.
pub fn scrub_text(text: &str, secrets: &[&str]) -> String {
    secrets
        .iter()
        .filter(|s| !s.is_empty())
        .fold(text.to_owned(), |text, secret| {
            text.replace(secret, REDACTED)
        })
}

/// A copy of `value` with every occurrence of each of `secrets` replaced,
/// in keys and strings, at every depth.
pub fn scrub(value: &Value, secrets: &[&str]) -> Value {
    if secrets.iter().all(|s| s.is_empty()) {
        return value.clone();
    }
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (scrub_text(k, secrets), scrub(v, secrets)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| scrub(v, secrets)).collect()),
        Value::String(s) => Value::String(scrub_text(s, secrets)),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn keys_are_read_as_words() {
        assert_eq!(words("userEmail"), ["user", "email"]);
        assert_eq!(words("USER_EMAIL"), ["user", "email"]);
        assert_eq!(words("x-api-key"), ["x", "api", "key"]);
        assert_eq!(words("APIKey"), ["apikey"]);
        assert_eq!(words("address2Line"), ["address", "2", "line"]);
        assert_eq!(words("apiKey2FA"), ["api", "key", "2", "fa"]);
        assert!(words("__").is_empty());
    }

    /// One key for each of the specifications' 13 audit patterns and for
    /// each of the kernel's sensitive keys.
    #[test]
    fn every_pattern_of_the_specifications_is_redacted() {
        let audit_patterns = [
            ("password", "newPassword"),
            ("secret", "client_secret_value"),
            ("token", "token"),
            ("api[_-]?key", "X-Api-Key"),
            ("api[_-]?key", "apikey"),
            ("credential", "smtpCredential"),
            ("email", "userEmail"),
            ("phone", "phone_number"),
            ("address", "homeAddress"),
            ("ssn", "SSN"),
            ("credit[_-]?card", "credit-card"),
            ("_secret$", "webhook_secret"),
            ("_token$", "refresh_token"),
            ("_key$", "private_key"),
        ];
        let kernel_keys = [
            "ssn",
            "dob",
            "password",
            "driver_license",
            "fein",
            "license_number",
            "date_of_birth",
        ];
        for (pattern, key) in audit_patterns {
            assert!(is_pii_key(key), "{key} (pattern {pattern}) is not redacted");
        }
        for key in kernel_keys {
            assert!(is_pii_key(key), "{key} is not redacted");
        }
    }

    #[test]
    fn counts_and_identifiers_stay_readable() {
        for key in [
            "max_tokens",
            "tokenCount",
            "tokens",
            "plan_key",
            "capabilityKey",
            "idempotency_key",
            "key",
            "secretary",
            "query",
            "count",
        ] {
            assert!(!is_pii_key(key), "{key} should not be redacted");
        }
    }

    #[test]
    fn header_values_that_are_credentials_are_redacted() {
        let args = json!({
            "url": "https://x.example/",
            "headers": {
                "Cookie": "sid=1", "Set-Cookie": "sid=2", "X-Auth": "a",
                "X-Session-Id": "s", "X-Csrf-Token": "t", "X-Client-Secret": "c",
                "X-Key": "k", "Proxy-Authorization": "p", "Accept": "application/json"
            },
            "key": "plan-visible"
        });
        let out = redact(&args);
        for name in [
            "Cookie",
            "Set-Cookie",
            "X-Auth",
            "X-Session-Id",
            "X-Csrf-Token",
            "X-Client-Secret",
            "X-Key",
            "Proxy-Authorization",
        ] {
            assert_eq!(out["headers"][name], REDACTED, "{name}");
        }
        assert_eq!(out["headers"]["Accept"], "application/json");
        assert_eq!(out["key"], "plan-visible");
        assert_eq!(redact(&json!({"cookie": "x"}))["cookie"], REDACTED);
    }

    #[test]
    fn secrets_known_by_value_are_scrubbed_everywhere() {
        let value = json!({"echo": "Bearer s3cr3t!", "s3cr3t!": [1, "x s3cr3t! y"], "n": 1});
        let out = scrub(&value, &["s3cr3t!"]);
        assert!(!out.to_string().contains("s3cr3t!"), "{out}");
        assert_eq!(out["n"], 1);
        assert_eq!(scrub(&value, &[""]), value);
    }

    #[test]
    fn redacts_pii_keys_at_every_depth() {
        let input = json!({
            "name": "Ada",
            "SSN": "123-45-6789",
            "profile": {"date_of_birth": "1815-12-10", "city": "London"},
            "accounts": [{"api_key": "k", "id": 1}],
            "nested": [[{"fein": "12-3456789", "ok": true}]],
            "password": {"old": "a", "new": "b"}
        });
        let out = redact(&input);
        assert_eq!(out["name"], "Ada");
        assert_eq!(out["SSN"], REDACTED);
        assert_eq!(out["profile"]["date_of_birth"], REDACTED);
        assert_eq!(out["profile"]["city"], "London");
        assert_eq!(out["accounts"][0]["api_key"], REDACTED);
        assert_eq!(out["accounts"][0]["id"], 1);
        assert_eq!(out["nested"][0][0]["fein"], REDACTED);
        assert_eq!(out["nested"][0][0]["ok"], true);
        // A whole sensitive subtree goes, not only its leaves.
        assert_eq!(out["password"], REDACTED);
    }
}
