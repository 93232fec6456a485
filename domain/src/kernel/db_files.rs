//! The embedded database's files are private to the user that runs the
//! server: an embedded install keeps its generated JWT signing secret and
//! connection encryption key in the database (see [`super::settings`]), so
//! whoever can read the file can mint a platform admin's token.
//!
//! Invariants (Unix):
//! - A database file that does not exist is created here, empty and with
//!   mode 0600, before SQLite opens it; SQLite creates its `-wal`, `-shm`
//!   and `-journal` files with the mode of the database file.
//! - On every start, the database file and any of those three that exist
//!   lose their group and other permission bits if they had any, with a
//!   warning in the log saying which file and what its mode was.
//! - An in-memory database has no file and nothing is done.

use std::path::PathBuf;

use crate::{Error, Result};

/// The files SQLite keeps beside a database, by suffix.
const COMPANIONS: [&str; 3] = ["-wal", "-shm", "-journal"];

/// The file a `sqlite:` URL names; `None` for an in-memory database.
pub fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path.is_empty() || path == ":memory:" || query.contains("mode=memory") {
        return None;
    }
    Some(PathBuf::from(path))
}

/// Create the database file of `url` private if it is missing, and make
/// it and its companions private if they are not (see the module docs).
#[cfg(unix)]
pub fn make_private(url: &str) -> Result<()> {
    use std::{
        fs::{self, OpenOptions, Permissions},
        io::ErrorKind,
        os::unix::fs::{OpenOptionsExt, PermissionsExt},
    };

    let Some(path) = sqlite_path(url) else {
        return Ok(());
    };
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(Error::Internal(format!(
                "cannot create the database file {}: {e}",
                path.display()
            )));
        }
    }
    let mut files = vec![path.clone()];
    files.extend(COMPANIONS.iter().map(|suffix| {
        let mut name = path.clone().into_os_string();
        name.push(suffix);
        PathBuf::from(name)
    }));
    for file in files {
        let Ok(meta) = fs::metadata(&file) else {
            continue;
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 == 0 {
            continue;
        }
        fs::set_permissions(&file, Permissions::from_mode(mode & 0o700)).map_err(|e| {
            Error::Internal(format!(
                "cannot make {} private (mode {mode:o}): {e}",
                file.display()
            ))
        })?;
        tracing::warn!(
            file = %file.display(),
            was = %format!("{mode:o}"),
            now = %format!("{:o}", mode & 0o700),
            "the embedded database file was readable by other users; it holds secrets, so its \
             group and other permissions were removed"
        );
    }
    Ok(())
}

/// Elsewhere the platform's defaults for new files apply.
#[cfg(not(unix))]
pub fn make_private(_url: &str) -> Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_read_from_urls() {
        assert_eq!(
            sqlite_path("sqlite://data/brainstem.db?mode=rwc"),
            Some(PathBuf::from("data/brainstem.db"))
        );
        assert_eq!(
            sqlite_path("sqlite:brainstem.db"),
            Some(PathBuf::from("brainstem.db"))
        );
        assert_eq!(sqlite_path("sqlite::memory:"), None);
        assert_eq!(sqlite_path("sqlite://x.db?mode=memory"), None);
        assert_eq!(sqlite_path("postgres://localhost/db"), None);
    }
}
