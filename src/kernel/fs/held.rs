//! Directories held by a descriptor: a results directory read, and the directory a
//! report is written into, so that whoever can rename entries around them changes
//! neither what is read nor where it is written.
//!
//! Reading ([`HeldDir`]): the directory is opened once (a symlink *at* the path given
//! is followed, as `ls DIR/` follows it); it is listed through that descriptor and
//! every file is opened relative to it with `openat(2)` and `O_NOFOLLOW`, after an
//! `fstatat(2)` that does not follow either, then `fstat`ed again. Read by path, the
//! listing and the opening could see two directories: a local user who owned the
//! parent of the results directory swapped it for a symlink between the two, and
//! `report` run as root copied a root-only file into its output (3 times in 1 167
//! runs). Through one descriptor there is no "between", and a symlink inside the
//! directory is never followed.
//!
//! Writing ([`NewDir`]): a directory with an unpredictable name is made mode 0700
//! beside the target, held by a descriptor, its files created `O_EXCL | O_NOFOLLOW`
//! through that descriptor, and renamed onto the target only once everything is
//! written; dropped before that, it is removed with what it holds. rename(2) puts a
//! directory only where nothing is or where an empty directory was, so a target that
//! holds files, a file, or a symlink is never replaced or written through.

use super::{FileError, FileKind, RegularFile};
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

fn os_error(e: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.raw_os_error())
}

/// What `st_mode` says a file is, when it is not a regular file.
fn kind_of(st_mode: u32) -> Option<FileKind> {
    match rfs::FileType::from_raw_mode(st_mode) {
        rfs::FileType::RegularFile => None,
        rfs::FileType::Directory => Some(FileKind::Directory),
        rfs::FileType::Fifo => Some(FileKind::Fifo),
        rfs::FileType::Socket => Some(FileKind::Socket),
        rfs::FileType::CharacterDevice => Some(FileKind::CharDevice),
        rfs::FileType::BlockDevice => Some(FileKind::BlockDevice),
        _ => Some(FileKind::Symlink),
    }
}

/// A name that stays inside the directory: one component, not `.` or `..` (openat(2)
/// would walk `a/b` through `a`, following it if it is a link).
fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/')
}

/// A directory opened once, every file of it read through that descriptor.
#[derive(Debug)]
pub struct HeldDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl HeldDir {
    /// Open the directory `path` (a symlink at `path` itself is followed, once);
    /// `what` names it in errors ("results directory").
    ///
    /// # Errors
    /// Missing, unreadable or not a directory.
    pub fn open(path: &Path, what: &'static str) -> Result<Self, FileError> {
        let fd = rfs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| FileError::Io {
            what,
            path: path.to_owned(),
            source: os_error(e),
        })?;
        Ok(Self {
            fd,
            path: path.to_owned(),
        })
    }

    /// The path it was opened by, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its permission bits, from the open descriptor.
    ///
    /// # Errors
    /// `fstat(2)` failed.
    pub fn mode(&self) -> Result<u32, FileError> {
        rfs::fstat(&self.fd)
            .map(|st| st.st_mode & 0o7777)
            .map_err(|e| self.io_error("directory", &self.path, e))
    }

    /// The names of its entries (not `.` and `..`), listed through the descriptor.
    ///
    /// # Errors
    /// Listing it failed.
    pub fn names(&self) -> Result<Vec<OsString>, FileError> {
        let listing_failed = |e| self.io_error("directory", &self.path, e);
        let mut names = Vec::new();
        for entry in rfs::Dir::read_from(&self.fd).map_err(listing_failed)? {
            let name = entry
                .map_err(listing_failed)?
                .file_name()
                .to_bytes()
                .to_vec();
            if name != b"." && name != b".." {
                names.push(OsString::from_vec(name));
            }
        }
        Ok(names)
    }

    /// Open its file `name` for reading if it is a regular file, a symlink never
    /// followed; `what` names it in errors, as `<directory>/<name>`.
    ///
    /// # Errors
    /// Missing, not a regular file (a symlink, a FIFO, a device, a directory), a name
    /// that is not one component, or unreadable.
    pub fn open_file(&self, name: &str, what: &'static str) -> Result<RegularFile, FileError> {
        let path = self.path.join(name);
        if !is_plain_name(name) {
            return Err(FileError::Io {
                what,
                path,
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "not a file name of this directory (a path, `.` or `..`)",
                ),
            });
        }
        // Refused before it is opened: opening a FIFO or a device can block or act.
        let st = rfs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| self.io_error(what, &path, e))?;
        if let Some(kind) = kind_of(st.st_mode) {
            return Err(FileError::NotRegular { what, path, kind });
        }
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = match rfs::openat(&self.fd, name, flags, Mode::empty()) {
            // Replaced by a symlink since the fstatat.
            Err(Errno::LOOP) => {
                return Err(FileError::NotRegular {
                    what,
                    path,
                    kind: FileKind::Symlink,
                })
            }
            Err(e) => return Err(self.io_error(what, &path, e)),
            Ok(fd) => fd,
        };
        RegularFile::checked(File::from(fd), what, path)
    }

    fn io_error(&self, what: &'static str, path: &Path, e: Errno) -> FileError {
        FileError::Io {
            what,
            path: path.to_owned(),
            source: os_error(e),
        }
    }
}

/// A directory written whole beside `target`, then renamed onto it ([module
/// docs](self)); removed with its files if dropped before [`NewDir::place`].
#[derive(Debug)]
pub struct NewDir {
    parent: OwnedFd,
    temp: String,
    fd: OwnedFd,
    target: PathBuf,
    written: Vec<String>,
    placed: bool,
}

impl NewDir {
    /// A new private directory (mode 0700) in `target`'s parent, with an
    /// unpredictable name starting `.rttlab-new-`.
    ///
    /// # Errors
    /// `target` has no file name (`/`, `..`), its parent cannot be opened, or the
    /// directory cannot be made there.
    pub fn beside(target: &Path) -> Result<Self, FileError> {
        let write_error = |source| FileError::Write {
            path: target.to_owned(),
            source,
        };
        let name_error = || {
            write_error(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a name a new directory can take (`/`, `.` or `..`)",
            ))
        };
        let name = target.file_name().ok_or_else(name_error)?;
        if name == "." || name == ".." {
            return Err(name_error());
        }
        let parent_path = target
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let dir = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let parent =
            rfs::open(parent_path, dir, Mode::empty()).map_err(|e| write_error(os_error(e)))?;
        let temp = loop {
            let temp = format!(".rttlab-new-{:016x}", rand::random::<u64>());
            match rfs::mkdirat(&parent, temp.as_str(), Mode::from_raw_mode(0o700)) {
                Ok(()) => break temp,
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(write_error(os_error(e))),
            }
        };
        let fd = match rfs::openat(
            &parent,
            temp.as_str(),
            dir | OFlags::NOFOLLOW,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = rfs::unlinkat(&parent, temp.as_str(), AtFlags::REMOVEDIR);
                return Err(write_error(os_error(e)));
            }
        };
        // Opened by name: whoever can write into the parent could have put a
        // directory of their own there in between; one this process made is its own.
        let ours = rfs::fstat(&fd).is_ok_and(|st| st.st_uid == rustix::process::geteuid().as_raw());
        let made = Self {
            parent,
            temp,
            fd,
            target: target.to_owned(),
            written: Vec::new(),
            placed: false,
        };
        if !ours {
            return Err(write_error(std::io::Error::other(
                "the new directory was replaced by someone else's while it was made",
            )));
        }
        Ok(made)
    }

    /// Create its file `name` (never one that exists, never through a link) with the
    /// permission bits `mode` (less the umask), for writing.
    ///
    /// # Errors
    /// `name` is not one component, or the file cannot be created.
    pub fn create(&mut self, name: &str, mode: u32) -> Result<File, FileError> {
        let path = self.target.join(name);
        if !is_plain_name(name) {
            return Err(FileError::Write {
                path,
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "not a file name (a path, `.` or `..`)",
                ),
            });
        }
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd =
            rfs::openat(&self.fd, name, flags, Mode::from_raw_mode(mode & 0o777)).map_err(|e| {
                FileError::Write {
                    path,
                    source: os_error(e),
                }
            })?;
        self.written.push(name.to_owned());
        Ok(File::from(fd))
    }

    /// Give it the permission bits `mode` and rename it onto the target.
    ///
    /// # Errors
    /// The target holds anything (a non-empty directory, a file, a symlink), or the
    /// rename failed; the new directory is then removed.
    pub fn place(mut self, mode: u32) -> Result<(), FileError> {
        let write_error = |source| FileError::Write {
            path: self.target.clone(),
            source,
        };
        rfs::fchmod(&self.fd, Mode::from_raw_mode(mode & 0o777))
            .map_err(|e| write_error(os_error(e)))?;
        let name = self.target.file_name().unwrap_or_default();
        match rfs::renameat(&self.parent, self.temp.as_str(), &self.parent, name) {
            Ok(()) => {}
            Err(Errno::NOTEMPTY | Errno::EXIST | Errno::NOTDIR | Errno::ISDIR) => {
                return Err(FileError::Occupied {
                    path: self.target.clone(),
                });
            }
            Err(e) => return Err(write_error(os_error(e))),
        }
        self.placed = true;
        // Renamed by name: what now stands at the target must be this directory.
        let here = rfs::statat(&self.parent, name, AtFlags::SYMLINK_NOFOLLOW);
        let mine = rfs::fstat(&self.fd);
        match (here, mine) {
            (Ok(h), Ok(m)) if h.st_ino == m.st_ino && h.st_dev == m.st_dev => Ok(()),
            _ => Err(write_error(std::io::Error::other(
                "the new directory was moved by someone else before it was put in place",
            ))),
        }
    }
}

impl Drop for NewDir {
    fn drop(&mut self) {
        if self.placed {
            return;
        }
        for name in &self.written {
            let _ = rfs::unlinkat(&self.fd, name.as_str(), AtFlags::empty());
        }
        let _ = rfs::unlinkat(&self.parent, self.temp.as_str(), AtFlags::REMOVEDIR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::{symlink, PermissionsExt};

    #[test]
    fn a_held_directory_reads_its_own_files_after_its_path_is_swapped_for_a_link() {
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("run");
        let elsewhere = top.path().join("elsewhere");
        std::fs::create_dir(&dir).unwrap();
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(dir.join("a"), "mine").unwrap();
        std::fs::write(elsewhere.join("a"), "theirs").unwrap();
        let held = HeldDir::open(&dir, "results directory").unwrap();
        std::fs::rename(&dir, top.path().join("moved")).unwrap();
        symlink(&elsewhere, &dir).unwrap();
        let mut text = String::new();
        held.open_file("a", "results file")
            .unwrap()
            .file()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "mine");
        assert_eq!(held.names().unwrap(), vec![OsString::from("a")]);
    }

    #[test]
    fn a_link_a_directory_or_a_path_inside_a_held_directory_is_refused() {
        let top = tempfile::tempdir().unwrap();
        std::fs::write(top.path().join("real"), "x").unwrap();
        symlink(top.path().join("real"), top.path().join("link")).unwrap();
        std::fs::create_dir(top.path().join("sub")).unwrap();
        let held = HeldDir::open(top.path(), "results directory").unwrap();
        let kind = |name| match held.open_file(name, "results file") {
            Err(FileError::NotRegular { kind, .. }) => Some(kind),
            _ => None,
        };
        assert_eq!(kind("link"), Some(FileKind::Symlink));
        assert_eq!(kind("sub"), Some(FileKind::Directory));
        for name in ["sub/../real", "..", ""] {
            assert!(
                matches!(
                    held.open_file(name, "results file"),
                    Err(FileError::Io { .. })
                ),
                "{name}"
            );
        }
    }

    #[test]
    fn a_new_directory_appears_whole_with_its_modes_or_not_at_all() {
        let top = tempfile::tempdir().unwrap();
        let target = top.path().join("out");
        let mut new = NewDir::beside(&target).unwrap();
        new.create("a", 0o600).unwrap().write_all(b"1").unwrap();
        assert!(!target.exists());
        new.place(0o750).unwrap();
        assert_eq!(std::fs::read_to_string(target.join("a")).unwrap(), "1");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&target.join("a")) & !0o600, 0);
        assert_eq!(mode(&target), 0o750);
        // Dropped before it is placed: nothing is left beside the target.
        let mut new = NewDir::beside(&top.path().join("other")).unwrap();
        new.create("b", 0o644).unwrap();
        drop(new);
        let left: Vec<_> = std::fs::read_dir(top.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }

    #[test]
    fn a_new_directory_never_replaces_files_or_links() {
        let top = tempfile::tempdir().unwrap();
        let full = top.path().join("full");
        std::fs::create_dir(&full).unwrap();
        std::fs::write(full.join("keep"), "k").unwrap();
        let link = top.path().join("link");
        symlink(&full, &link).unwrap();
        for target in [&full, &link] {
            let new = NewDir::beside(target).unwrap();
            assert!(
                matches!(new.place(0o755), Err(FileError::Occupied { .. })),
                "{}",
                target.display()
            );
        }
        assert_eq!(std::fs::read_to_string(full.join("keep")).unwrap(), "k");
        assert_eq!(std::fs::read_dir(top.path()).unwrap().count(), 2);
        // An empty directory is replaced.
        let empty = top.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        NewDir::beside(&empty).unwrap().place(0o755).unwrap();
    }
}
