//! The shared secret, the same way on every command that talks to `rttlab serve`:
//! `--secret-file PATH` or the environment variable `RTTLAB_SECRET`. A secret on the
//! command line would be readable by every user in `/proc/PID/cmdline`, so the flag
//! that takes one directly is hidden and kept for tests only.

use anyhow::{bail, Context};
use clap::Args;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

#[derive(Args, Debug, Clone, Default)]
pub struct SecretArgs {
    /// File holding the shared secret (its first line; the file must not be readable by
    /// group or others). Both ends prove they know it and every control message is
    /// authenticated with it. Or set RTTLAB_SECRET.
    #[arg(long, value_name = "PATH", conflicts_with = "secret")]
    pub secret_file: Option<PathBuf>,
    /// The secret itself (visible to every user in the process list: for tests only).
    #[arg(long, env = "RTTLAB_SECRET", hide_env_values = true, hide = true)]
    pub secret: Option<String>,
}

impl SecretArgs {
    /// The secret's bytes, if one was given.
    ///
    /// # Errors
    /// The file cannot be read, is readable by others, or the secret is empty.
    pub fn load(&self) -> anyhow::Result<Option<Vec<u8>>> {
        let secret = match (&self.secret_file, &self.secret) {
            (Some(path), _) => read_secret_file(path)?,
            (None, Some(s)) => s.clone(),
            (None, None) => return Ok(None),
        };
        if secret.is_empty() {
            bail!("the secret is empty: put at least one character in it");
        }
        Ok(Some(secret.into_bytes()))
    }
}

fn read_secret_file(path: &Path) -> anyhow::Result<String> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read the secret file {}", path.display()))?;
    let mode = meta.permissions().mode();
    if mode & 0o077 != 0 {
        bail!(
            "secret file {} is readable by others (mode {:o}): chmod 600 {}",
            path.display(),
            mode & 0o777,
            path.display()
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the secret file {}", path.display()))?;
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
}
