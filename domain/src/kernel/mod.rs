//! The kernel: what every area needs and that knows no area.
//!
//! Invariants:
//! - Nothing here imports another area of the crate.
//! - Only [`db`], [`columns`] and [`text_match`] know the differences
//!   between SQLite and PostgreSQL that are not in SQL the two share
//!   (connecting, migrations, statement counting, reading a row, matching
//!   text regardless of case); areas that write dialect-specific
//!   SQL (memory search, the executor's claim, a task page's lateral
//!   reads) ask which backend they run on.
//! - [`audit::PlatformScope`] is the only way to read across tenants, and
//!   opening one writes an audit row.
//! - On PostgreSQL, [`row_security`] is the second wall: a connection shows
//!   only the rows of the tenant the work that took it runs for.

pub mod audit;
pub mod columns;
pub mod crypto;
pub mod db;
pub mod db_files;
pub mod db_write;
pub mod error;
pub mod http_client;
pub mod job_lease;
pub mod json_schema;
pub mod metrics;
pub mod origin;
pub mod outbound;
pub mod page;
pub mod principal;
pub mod rate_limit;
pub mod redact;
pub mod replicas;
pub mod row_security;
pub mod session_lock;
pub mod settings;
pub mod template;
pub mod text_match;
pub mod waiting;
