//! The shared secret, the same way on every command that talks to `rttlab serve`:
//! `--secret-file PATH` or the environment variable `RTTLAB_SECRET`. A secret on the
//! command line would be readable by every user in `/proc/PID/cmdline`, so the flag
//! that takes one directly is hidden and kept for tests only.

use anyhow::bail;
use clap::Args;
use rttlab::kernel::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

#[derive(Args, Debug, Clone, Default)]
pub struct SecretArgs {
    /// File holding the shared secret (its first line; the file must not be readable by
    /// group or others). Both ends prove they know it and every control message is
    /// authenticated with it. Or set RTTLAB_SECRET.
    #[arg(long, value_name = "PATH")]
    pub secret_file: Option<PathBuf>,
    /// The secret itself (visible to every user in the process list: for tests only).
    /// Empty (`RTTLAB_SECRET=`) means no secret, as when it is unset.
    #[arg(long, env = "RTTLAB_SECRET", hide_env_values = true, hide = true)]
    pub secret: Option<String>,
}

impl SecretArgs {
    /// The secret's bytes, if one was given. An empty `RTTLAB_SECRET` is no secret
    /// (a shell's `RTTLAB_SECRET= cmd` or an env file's empty line), not a conflict
    /// with `--secret-file`.
    ///
    /// # Errors
    /// Both a file and a secret are given, the file cannot be read, is not a regular
    /// file, is readable by others, or the secret is empty.
    pub fn load(&self) -> anyhow::Result<Option<Vec<u8>>> {
        let given = self.secret.as_deref().filter(|s| !s.is_empty());
        let secret = match (&self.secret_file, given) {
            (Some(_), Some(_)) => bail!(
                "both --secret-file and RTTLAB_SECRET give a secret: unset RTTLAB_SECRET or drop --secret-file"
            ),
            (Some(path), None) => read_secret_file(path)?,
            (None, Some(s)) => s.to_owned(),
            (None, None) => return Ok(None),
        };
        if secret.is_empty() {
            bail!("the secret is empty: put at least one character in it");
        }
        if secret.len() < SECRET_FEW_BYTES {
            eprintln!(
                "warning: a secret of {} byte(s) is quickly guessed by whoever can reach the server: use at least {SECRET_FEW_BYTES} (head -c 18 /dev/urandom | base64 > FILE; chmod 600 FILE)",
                secret.len()
            );
        }
        Ok(Some(secret.into_bytes()))
    }
}

/// Shorter secrets are used, with a warning: a serve that answers a wrong secret at
/// once lets a guesser try thousands a second.
const SECRET_FEW_BYTES: usize = 12;

/// A secret is one line: anything longer than this is not a secret file.
const SECRET_MAX_BYTES: u64 = 64 << 10;

/// The first line of a private regular file (the checks are made on the opened
/// descriptor, so the file read is the file checked).
fn read_secret_file(path: &Path) -> anyhow::Result<String> {
    let file = fs::RegularFile::open(path, "secret file").map_err(|e| match e {
        fs::FileError::NotRegular {
            kind: fs::FileKind::Directory,
            ..
        } => anyhow::anyhow!("{} is a directory, not a secret file", path.display()),
        e => anyhow::Error::new(e),
    })?;
    let mode = file.metadata().permissions().mode();
    if mode & 0o077 != 0 {
        bail!(
            "secret file {} is readable by others (mode {:o}): chmod 600 {}",
            path.display(),
            mode & 0o777,
            path.display()
        );
    }
    let text = file.read_text(SECRET_MAX_BYTES)?;
    Ok(text.lines().next().unwrap_or("").to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(mode: u32, text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        f
    }

    #[test]
    fn the_first_line_of_a_private_file_is_the_secret() {
        let f = file(0o600, "correct horse\nignored\n");
        let a = SecretArgs {
            secret_file: Some(f.path().into()),
            secret: None,
        };
        assert_eq!(a.load().unwrap(), Some(b"correct horse".to_vec()));
    }

    #[test]
    fn a_file_others_can_read_or_an_empty_secret_is_refused() {
        let f = file(0o644, "s3cret\n");
        let a = SecretArgs {
            secret_file: Some(f.path().into()),
            secret: None,
        };
        let e = a.load().unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
        let f = file(0o600, "\n");
        let a = SecretArgs {
            secret_file: Some(f.path().into()),
            secret: None,
        };
        assert!(a.load().unwrap_err().to_string().contains("empty"));
        assert_eq!(SecretArgs::default().load().unwrap(), None);
    }

    #[test]
    fn an_empty_environment_secret_is_none_and_a_directory_says_so() {
        let f = file(0o600, "s3cret\n");
        let a = SecretArgs {
            secret_file: Some(f.path().into()),
            secret: Some(String::new()),
        };
        assert_eq!(a.load().unwrap(), Some(b"s3cret".to_vec()));
        let a = SecretArgs {
            secret_file: None,
            secret: Some(String::new()),
        };
        assert_eq!(a.load().unwrap(), None);
        let a = SecretArgs {
            secret_file: Some(f.path().into()),
            secret: Some("other".into()),
        };
        let e = a.load().unwrap_err().to_string();
        assert!(
            e.contains("RTTLAB_SECRET") && !e.contains("'--secret'"),
            "{e}"
        );
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let a = SecretArgs {
            secret_file: Some(d.path().into()),
            secret: None,
        };
        let e = a.load().unwrap_err().to_string();
        assert_eq!(
            e,
            format!("{} is a directory, not a secret file", d.path().display())
        );
    }
}
