//! Files rttlab reads for someone else or writes where someone else may reach: bounded
//! reads of untrusted config-like files and results, and writes that a planted symlink
//! cannot redirect.
//!
//! Reading ([`read`], [`read_text`], [`RegularFile`]): the path is
//! `stat`ed first (a symlink is followed) and anything but a regular file is refused by
//! name before it is opened — opening a FIFO blocks until a writer comes, opening some
//! devices acts. It is then opened `O_NONBLOCK | O_NOCTTY` and the descriptor is
//! `fstat`ed again, since the path may have been replaced in between: what is read is
//! what was checked. `st_size` is never trusted (/proc files say 0, a file may grow
//! underneath): at most the cap plus one byte is read, and one byte more than the cap
//! is a refusal. A peers file pointed at /dev/zero once took an agent from 187 MB to
//! 5.1 GB in 10 s.
//!
//! Writing ([`write_replace`], [`create_replace`], [`open_append`]): a fresh temporary
//! with an unpredictable name is created `O_CREAT | O_EXCL | O_NOFOLLOW` beside the
//! target and renamed over it. rename(2) replaces a symlink itself, never what it
//! points to, so even a symlink planted after the check cannot redirect the write; an
//! existing symlink at the target is refused with a message rather than replaced
//! silently, as is a FIFO, a device or a directory (which rename(2) would replace or
//! fail on). No predictable path is ever removed and then created again.

pub mod held;

use std::ffi::CString;
use std::fs::{File, Metadata};
use std::io::{self, Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// The cap for peers, config and secret files: far beyond any real one (a 20 000-peer
/// file_sd file is about 0.5 MiB).
pub const CONFIG_MAX_BYTES: u64 = 16 << 20;

/// The cap for a results directory's files: a long run's trials.jsonl or samples file
/// is tens of MiB.
pub const RESULTS_MAX_BYTES: u64 = 256 << 20;

/// The mode of the files rttlab writes (before the umask): results, reports and
/// metrics are for everyone to read.
const MODE: libc::mode_t = 0o644;

/// What a path is, when it is not a regular file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A directory.
    Directory,
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
    /// A character device (/dev/zero, a terminal).
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A symbolic link (seen where none is followed).
    Symlink,
}

impl FileKind {
    fn of(m: &Metadata) -> Option<Self> {
        let t = m.file_type();
        if t.is_file() {
            None
        } else if t.is_dir() {
            Some(Self::Directory)
        } else if t.is_fifo() {
            Some(Self::Fifo)
        } else if t.is_socket() {
            Some(Self::Socket)
        } else if t.is_char_device() {
            Some(Self::CharDevice)
        } else if t.is_block_device() {
            Some(Self::BlockDevice)
        } else {
            Some(Self::Symlink)
        }
    }
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Directory => "a directory",
            Self::Fifo => "a FIFO",
            Self::Socket => "a socket",
            Self::CharDevice => "a character device",
            Self::BlockDevice => "a block device",
            Self::Symlink => "a symbolic link",
        })
    }
}

/// A number of bytes as people read it: `16 MiB`, `1.5 KiB`, `300 bytes`.
struct Bytes(u64);

impl std::fmt::Display for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0;
        for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
            if n >= size {
                return if n % size == 0 {
                    write!(f, "{} {unit}", n / size)
                } else {
                    write!(f, "{:.1} {unit}", n as f64 / size as f64)
                };
            }
        }
        write!(f, "{n} bytes")
    }
}

/// `path` as a message shows it: its control characters escaped, so that a file name
/// holding a newline or a terminal escape can neither forge a line nor garble one.
pub(crate) fn shown(path: &Path) -> String {
    crate::excerpt(&path.to_string_lossy(), usize::MAX)
}

/// A file that could not be read or written safely; every message names the file and
/// the reason.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Opening, inspecting or reading failed.
    #[error("{what} {}", shown(.path))]
    Io {
        /// What the file is, named in the message ("peers file", "secret file").
        what: &'static str,
        /// The path as given.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Not a regular file (after following symlinks).
    #[error("{what} {}: {kind}, not a regular file", shown(.path))]
    NotRegular {
        /// What the file is, named in the message ("peers file", "secret file").
        what: &'static str,
        /// The path as given (a symlink, if it is one, was followed).
        path: PathBuf,
        /// What it is instead.
        kind: FileKind,
    },
    /// Larger than the cap, by its size.
    #[error("{what} {} is {}, more than the {} allowed", shown(.path), Bytes(*.size), Bytes(*.max))]
    TooLarge {
        /// What the file is, named in the message ("peers file", "secret file").
        what: &'static str,
        /// The path as given.
        path: PathBuf,
        /// Its size by `fstat(2)`, in bytes.
        size: u64,
        /// The cap, in bytes.
        max: u64,
    },
    /// More bytes than the cap came out of a file whose size said otherwise (a /proc
    /// file, a file growing underneath).
    #[error("{what} {}: more than the {} allowed", shown(.path), Bytes(*.max))]
    Overflow {
        /// What the file is, named in the message ("peers file", "secret file").
        what: &'static str,
        /// The path as given.
        path: PathBuf,
        /// The cap, in bytes; reading gave at least one byte more.
        max: u64,
    },
    /// A symlink whose target does not exist.
    #[error("{what} {}: a symlink to {}, which does not exist", shown(.path), shown(.to))]
    Dangling {
        /// What the file is, named in the message ("peers file", "secret file").
        what: &'static str,
        /// The symlink.
        path: PathBuf,
        /// Where it points, as `readlink(2)` gives it (empty when that failed).
        to: PathBuf,
    },
    /// A symlink in a directory that leads out of it.
    #[error("{what} {}: a symlink pointing out of {}", shown(.path), shown(.dir))]
    OutsideDir {
        /// What the file is, named in the message ("peers file", "secret file").
        what: &'static str,
        /// The symlink.
        path: PathBuf,
        /// The directory it leads out of, as given.
        dir: PathBuf,
    },
    /// A name that is not one plain file name inside the directory it is looked up in.
    #[error("{what} {}: not a file name inside {}", crate::excerpt(.name, 200), shown(.dir))]
    NotAName {
        /// What the file is, named in the message.
        what: &'static str,
        /// The name as given.
        name: String,
        /// The directory.
        dir: PathBuf,
    },
    /// Not UTF-8 text.
    #[error("{what} {}: not UTF-8 text", shown(.path))]
    NotText {
        /// What the file is, named in the message ("peers file", "secret file").
        what: &'static str,
        /// The path as given.
        path: PathBuf,
    },
    /// A symlink stands where a file is to be written.
    #[error("{} is a symbolic link: refusing to write through it (remove it or choose another path)", shown(.path))]
    SymlinkTarget {
        /// The path to be written, which is a symlink.
        path: PathBuf,
    },
    /// A new directory is to be put where something already is.
    #[error("{} already exists and is not an empty directory: it is written whole as a new directory, never merged into what is there; remove it or choose another path", shown(.path))]
    Occupied {
        /// The directory to be written.
        path: PathBuf,
    },
    /// Creating, writing or renaming the file failed.
    #[error("writing {}", shown(.path))]
    Write {
        /// The file to be written (never its temporary).
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

impl FileError {
    /// The same error, its paths under `from` named under `to` instead: a file read
    /// from a private copy is named as the original the user gave.
    #[must_use]
    pub fn moved(mut self, from: &Path, to: &Path) -> Self {
        let paths: Vec<&mut PathBuf> = match &mut self {
            Self::Io { path, .. }
            | Self::NotRegular { path, .. }
            | Self::TooLarge { path, .. }
            | Self::Overflow { path, .. }
            | Self::NotText { path, .. }
            | Self::SymlinkTarget { path }
            | Self::Occupied { path }
            | Self::Dangling { path, .. }
            | Self::Write { path, .. } => vec![path],
            Self::OutsideDir { path, dir, .. } => vec![path, dir],
            Self::NotAName { dir, .. } => vec![dir],
        };
        for p in paths {
            if let Ok(rest) = p.strip_prefix(from) {
                *p = to.join(rest);
            }
        }
        self
    }

    /// Whether the file does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"))
}

/// `open(2)` with `flags` (and `O_CLOEXEC`), creating with [`MODE`].
fn open_raw(path: &Path, flags: libc::c_int) -> io::Result<File> {
    let c = c_path(path)?;
    // SAFETY: a NUL-terminated path; the mode argument is read only with O_CREAT.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            flags | libc::O_CLOEXEC,
            libc::c_uint::from(MODE),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor open(2) just returned, owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// A regular file opened for reading, with the metadata of the open descriptor.
#[derive(Debug)]
pub struct RegularFile {
    file: File,
    meta: Metadata,
    what: &'static str,
    path: PathBuf,
}

impl RegularFile {
    /// Open `path` (a symlink is followed) if it is a regular file; `what` names it in
    /// errors ("peers file").
    ///
    /// # Errors
    /// Missing or unreadable, or not a regular file.
    pub fn open(path: &Path, what: &'static str) -> Result<Self, FileError> {
        Self::open_with(path, path, what, 0)
    }

    /// Open `target`, naming it `path` in errors; `extra` flags (O_NOFOLLOW).
    fn open_with(
        path: &Path,
        target: &Path,
        what: &'static str,
        extra: libc::c_int,
    ) -> Result<Self, FileError> {
        let io_err = |source| FileError::Io {
            what,
            path: path.to_owned(),
            source,
        };
        // Refused before it is opened: opening a FIFO or a device can block or act.
        if let Some(kind) = FileKind::of(&std::fs::metadata(target).map_err(io_err)?) {
            return Err(FileError::NotRegular {
                what,
                path: path.to_owned(),
                kind,
            });
        }
        let file = open_raw(
            target,
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | extra,
        )
        .map_err(io_err)?;
        // The path may have been replaced since the check: the descriptor is judged.
        Self::checked(file, what, path.to_owned())
    }

    /// `file`, opened by whoever called as `path`, if its descriptor is a regular file.
    fn checked(file: File, what: &'static str, path: PathBuf) -> Result<Self, FileError> {
        let meta = file.metadata().map_err(|source| FileError::Io {
            what,
            path: path.clone(),
            source,
        })?;
        if let Some(kind) = FileKind::of(&meta) {
            return Err(FileError::NotRegular { what, path, kind });
        }
        Ok(Self {
            file,
            meta,
            what,
            path,
        })
    }

    /// The metadata of the open descriptor (its mode, owner, size).
    pub fn metadata(&self) -> &Metadata {
        &self.meta
    }

    /// The open file, to read a part of it.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Every byte, if there are at most `max_bytes`.
    ///
    /// # Errors
    /// Larger than `max_bytes` (by its size, or by what reading it gave), or a read error.
    pub fn read(self, max_bytes: u64) -> Result<Vec<u8>, FileError> {
        let mut buf =
            Vec::with_capacity(usize::try_from(self.meta.len().min(max_bytes)).unwrap_or(0));
        self.copy_to(&mut buf, max_bytes)?;
        Ok(buf)
    }

    /// Copy every byte into `to`, if there are at most `max_bytes`, without holding
    /// them all; returns how many.
    ///
    /// # Errors
    /// As [`RegularFile::read`]; writing `to` failed (named as the file read).
    pub fn copy_to(self, to: &mut impl Write, max_bytes: u64) -> Result<u64, FileError> {
        if self.meta.len() > max_bytes {
            return Err(FileError::TooLarge {
                what: self.what,
                path: self.path,
                size: self.meta.len(),
                max: max_bytes,
            });
        }
        let mut limited = (&self.file).take(max_bytes.saturating_add(1));
        match io::copy(&mut limited, to) {
            Ok(n) if n > max_bytes => Err(FileError::Overflow {
                what: self.what,
                path: self.path,
                max: max_bytes,
            }),
            Ok(n) => Ok(n),
            Err(source) => Err(FileError::Io {
                what: self.what,
                path: self.path,
                source,
            }),
        }
    }

    /// The file as UTF-8 text, if it is at most `max_bytes` long.
    ///
    /// # Errors
    /// As [`RegularFile::read`], or not UTF-8.
    pub fn read_text(self, max_bytes: u64) -> Result<String, FileError> {
        let (what, path) = (self.what, self.path.clone());
        String::from_utf8(self.read(max_bytes)?).map_err(|_| FileError::NotText { what, path })
    }
}

/// The bytes of the regular file `path` (a symlink is followed), at most `max_bytes`.
///
/// # Errors
/// As [`RegularFile::open`] and [`RegularFile::read`].
pub fn read(path: &Path, what: &'static str, max_bytes: u64) -> Result<Vec<u8>, FileError> {
    RegularFile::open(path, what)?.read(max_bytes)
}

/// The text of the regular file `path` (a symlink is followed), at most `max_bytes`.
///
/// # Errors
/// As [`read`], or not UTF-8.
pub fn read_text(path: &Path, what: &'static str, max_bytes: u64) -> Result<String, FileError> {
    RegularFile::open(path, what)?.read_text(max_bytes)
}

/// The regular file `name` of the directory `dir`, opened: a symlink is followed only
/// to a file inside `dir`, and the file finally opened is opened `O_NOFOLLOW`, so a
/// symlink swapped in after the check is refused too.
///
/// # Errors
/// As [`RegularFile::open`], or a symlink that leads out of `dir`.
pub fn open_in(dir: &Path, name: &str, what: &'static str) -> Result<RegularFile, FileError> {
    let path = dir.join(name);
    // A name read from a file of `dir` (a results record's `samples_file`) must not
    // lead the reader out of it: one plain name, no separator, `.` or `..`.
    let mut parts = Path::new(name).components();
    if !matches!(
        (parts.next(), parts.next()),
        (Some(std::path::Component::Normal(_)), None)
    ) {
        return Err(FileError::NotAName {
            what,
            name: name.to_owned(),
            dir: dir.to_owned(),
        });
    }
    let io_err = |source| FileError::Io {
        what,
        path: path.clone(),
        source,
    };
    let link = std::fs::symlink_metadata(&path).map_err(io_err)?;
    if !link.file_type().is_symlink() {
        return RegularFile::open_with(&path, &path, what, libc::O_NOFOLLOW);
    }
    let target = match path.canonicalize() {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(FileError::Dangling {
                what,
                to: std::fs::read_link(&path).unwrap_or_default(),
                path,
            })
        }
        Err(e) => return Err(io_err(e)),
    };
    let root = dir.canonicalize().map_err(io_err)?;
    if !target.starts_with(&root) {
        return Err(FileError::OutsideDir {
            what,
            path,
            dir: dir.to_owned(),
        });
    }
    RegularFile::open_with(&path, &target, what, libc::O_NOFOLLOW)
}

/// The text of the file `name` in `dir` ([`open_in`]), at most `max_bytes`.
///
/// # Errors
/// As [`open_in`] and [`RegularFile::read_text`].
pub fn read_text_in(
    dir: &Path,
    name: &str,
    what: &'static str,
    max_bytes: u64,
) -> Result<String, FileError> {
    open_in(dir, name, what)?.read_text(max_bytes)
}

/// Refuse a target that is a symlink (the write would replace the link, which is
/// rarely what whoever made it meant) or anything else but a regular file: rename(2)
/// would replace a FIFO or a device node with a regular file (`--hdr-log /dev/null`
/// run as root replaced /dev/null), and a directory can only fail later.
fn refuse_special(path: &Path) -> Result<(), FileError> {
    let Ok(m) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    match FileKind::of(&m) {
        None => Ok(()),
        Some(FileKind::Symlink) => Err(FileError::SymlinkTarget {
            path: path.to_owned(),
        }),
        Some(kind) => Err(FileError::NotRegular {
            what: "output file",
            path: path.to_owned(),
            kind,
        }),
    }
}

/// A fresh temporary beside `path`: an unpredictable name (`.NAME.<random>.tmp`, so
/// collectors that read `*.prom` or `*.json` never see it), created `O_EXCL |
/// O_NOFOLLOW`.
fn fresh_temporary(path: &Path) -> Result<(File, PathBuf), FileError> {
    let write_err = |source| FileError::Write {
        path: path.to_owned(),
        source,
    };
    let name = path.file_name().ok_or_else(|| {
        write_err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no file name in the path",
        ))
    })?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut last = None;
    // A collision of 64 random bits means someone else is guessing: a few tries.
    for _ in 0..4 {
        // rand's thread generator: ChaCha seeded from the OS, unpredictable to others.
        let r: u64 = rand::random();
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".{r:016x}.tmp"));
        let tmp = dir.join(tmp_name);
        match open_raw(
            &tmp,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
        ) {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(write_err(e)),
        }
    }
    Err(write_err(last.unwrap_or_else(|| {
        io::Error::from(io::ErrorKind::AlreadyExists)
    })))
}

/// Rename `tmp` over `path`, removing `tmp` if that fails.
fn rename_over(tmp: &Path, path: &Path) -> Result<(), FileError> {
    std::fs::rename(tmp, path).map_err(|source| {
        let _ = std::fs::remove_file(tmp);
        FileError::Write {
            path: path.to_owned(),
            source,
        }
    })
}

/// Replace `path` with `contents`: written to a fresh temporary beside it, then
/// renamed over it, so a reader sees the old file or the new one, never half, and a
/// symlink cannot redirect the write.
///
/// # Errors
/// `path` is a symlink, or its directory is not writable.
pub fn write_replace(path: &Path, contents: &[u8]) -> Result<(), FileError> {
    refuse_special(path)?;
    let (mut f, tmp) = fresh_temporary(path)?;
    if let Err(source) = f.write_all(contents) {
        let _ = std::fs::remove_file(&tmp);
        return Err(FileError::Write {
            path: path.to_owned(),
            source,
        });
    }
    drop(f);
    rename_over(&tmp, path)
}

/// A new, empty file at `path` for a log written as a run goes (an HDR log, a slow
/// log): a fresh temporary renamed into place at once, so an existing file (or one a
/// hard link shares) is replaced, never truncated, and a symlink cannot redirect it.
///
/// # Errors
/// As [`write_replace`].
pub fn create_replace(path: &Path) -> Result<File, FileError> {
    refuse_special(path)?;
    let (f, tmp) = fresh_temporary(path)?;
    rename_over(&tmp, path)?;
    Ok(f)
}

/// `path` opened for appending (created if missing), `O_NOFOLLOW`: a symlink is
/// refused, as is anything but a regular file (a FIFO is not waited on).
///
/// # Errors
/// A symlink, not a regular file, or it cannot be opened.
pub fn open_append(path: &Path) -> Result<File, FileError> {
    let not_regular = |m: &Metadata| {
        FileKind::of(m).map_or(Ok(()), |kind| match kind {
            FileKind::Symlink => Err(FileError::SymlinkTarget {
                path: path.to_owned(),
            }),
            kind => Err(FileError::NotRegular {
                what: "output file",
                path: path.to_owned(),
                kind,
            }),
        })
    };
    // Named before opening (a FIFO without a reader would only say ENXIO); the
    // descriptor is checked again below.
    if let Ok(m) = std::fs::symlink_metadata(path) {
        not_regular(&m)?;
    }
    let f = open_raw(
        path,
        libc::O_WRONLY
            | libc::O_APPEND
            | libc::O_CREAT
            | libc::O_NOFOLLOW
            | libc::O_NONBLOCK
            | libc::O_NOCTTY,
    )
    .map_err(|source| {
        if source.raw_os_error() == Some(libc::ELOOP) {
            FileError::SymlinkTarget {
                path: path.to_owned(),
            }
        } else {
            FileError::Write {
                path: path.to_owned(),
                source,
            }
        }
    })?;
    let meta = f.metadata().map_err(|source| FileError::Write {
        path: path.to_owned(),
        source,
    })?;
    not_regular(&meta)?;
    Ok(f)
}

/// A private directory for scratch work, made by mkdtemp(3) (an unpredictable name,
/// mode 0700, never one that existed) and removed with what it holds when dropped.
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// A new directory named `PREFIX-` and six random characters, in the system's
    /// temporary directory (mkdtemp(3)).
    ///
    /// # Errors
    /// mkdtemp failed (a full or read-only /tmp).
    pub fn new(prefix: &str) -> Result<Self, FileError> {
        // mkdtemp(3) replaces the template's last six characters, which must be 'X'.
        let template = std::env::temp_dir().join(format!("{prefix}-{}", "X".repeat(6)));
        let write_err = |source| FileError::Write {
            path: template.clone(),
            source,
        };
        let mut bytes = c_path(&template).map_err(write_err)?.into_bytes_with_nul();
        // SAFETY: a NUL-terminated, writable template ending in the six characters
        // mkdtemp overwrites in place.
        if unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) }.is_null() {
            return Err(write_err(io::Error::last_os_error()));
        }
        bytes.pop();
        Ok(Self(PathBuf::from(std::ffi::OsString::from_vec(bytes))))
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A file's identity, to notice it changed: modified time, length and inode (a file
/// replaced by a rename has a new inode, whatever its time and length).
pub type FileStamp = (std::time::SystemTime, u64, u64);

/// `path`'s [`FileStamp`] (a symlink followed); `None` when it cannot be read.
pub fn stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

/// `statfs(2)`'s `f_type` of a cgroup v1 file system.
pub const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
/// `statfs(2)`'s `f_type` of the cgroup2 file system.
pub const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// The magic number of the file system `path` is on (`statfs(2)`'s `f_type`), or
/// `None` when it cannot be asked.
pub fn magic(path: &Path) -> Option<i64> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs is plain old data; all zeroes is a valid value.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `s` a writable statfs that outlives the call.
    (unsafe { libc::statfs(c.as_ptr(), &mut s) } == 0).then_some(s.f_type as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// Witness: the file system (the file outside is never opened: its refusal names
    /// the name) and the message. A name read from a results record that leads out
    /// of the directory is refused before anything is opened.
    #[test]
    fn a_name_that_leads_out_of_its_directory_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("run")).unwrap();
        std::fs::write(d.path().join("secret"), "root:x:0:0").unwrap();
        std::fs::write(d.path().join("run/ok.csv"), "t_s").unwrap();
        let run = d.path().join("run");
        assert_eq!(
            read_text_in(&run, "ok.csv", "results file", 64).unwrap(),
            "t_s"
        );
        for name in ["../secret", "/etc/hostname", "sub/ok.csv", "..", ".", ""] {
            let e = open_in(&run, name, "results file").unwrap_err();
            assert!(matches!(e, FileError::NotAName { .. }), "{name}: {e}");
            assert!(!e.to_string().contains("root:x"), "{e}");
        }
        assert_eq!(
            open_in(&run, "../secret", "results file")
                .unwrap_err()
                .to_string(),
            format!(
                "results file ../secret: not a file name inside {}",
                run.display()
            )
        );
    }

    /// Witness: the message's bytes. A name holding a newline and a terminal escape
    /// is shown with both escaped, on one line.
    #[test]
    fn a_file_name_with_control_characters_is_shown_escaped() {
        let e = FileError::NotText {
            what: "results file",
            path: PathBuf::from("/tmp/a\nrttlab: all good\u{1b}[2J.jsonl"),
        };
        assert_eq!(
            e.to_string(),
            "results file /tmp/a\\nrttlab: all good\\u{1b}[2J.jsonl: not UTF-8 text"
        );
    }

    fn fifo(p: &Path) {
        let c = c_path(p).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn a_fifo_is_refused_by_name_without_waiting_for_a_writer() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("peers.json");
        fifo(&p);
        let t0 = std::time::Instant::now();
        let e = read(&p, "peers file", CONFIG_MAX_BYTES).unwrap_err();
        assert!(t0.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(
            e.to_string(),
            format!("peers file {}: a FIFO, not a regular file", p.display())
        );
        // Named in a directory too, and by open_append.
        assert!(matches!(
            open_in(d.path(), "peers.json", "results file").unwrap_err(),
            FileError::NotRegular {
                kind: FileKind::Fifo,
                ..
            }
        ));
        assert!(matches!(
            open_append(&p).unwrap_err(),
            FileError::NotRegular {
                kind: FileKind::Fifo,
                ..
            }
        ));
    }

    #[test]
    fn dev_zero_and_a_symlink_to_it_are_refused_as_devices() {
        let e = read(Path::new("/dev/zero"), "peers file", CONFIG_MAX_BYTES).unwrap_err();
        assert_eq!(
            e.to_string(),
            "peers file /dev/zero: a character device, not a regular file"
        );
        let d = tempfile::tempdir().unwrap();
        let link = d.path().join("peers.json");
        symlink("/dev/zero", &link).unwrap();
        let e = read_text(&link, "peers file", CONFIG_MAX_BYTES).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("a character device, not a regular file"),
            "{e}"
        );
    }

    #[test]
    fn a_directory_is_refused_as_one() {
        let d = tempfile::tempdir().unwrap();
        let e = read(d.path(), "secret file", 64).unwrap_err();
        assert!(matches!(
            e,
            FileError::NotRegular {
                kind: FileKind::Directory,
                ..
            }
        ));
        assert!(e.to_string().contains(": a directory, not a regular file"));
    }

    #[test]
    fn a_symlink_to_a_regular_file_is_followed() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real.json");
        std::fs::write(&real, "[]").unwrap();
        let link = d.path().join("link.json");
        symlink(&real, &link).unwrap();
        assert_eq!(read_text(&link, "peers file", 16).unwrap(), "[]");
        // Inside the directory, a link to a sibling is followed as well.
        assert_eq!(
            read_text_in(d.path(), "link.json", "results file", 16).unwrap(),
            "[]"
        );
    }

    #[test]
    fn in_a_directory_a_symlink_out_of_it_is_refused() {
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("passwd");
        std::fs::write(&secret, "root:x:0:0").unwrap();
        let d = tempfile::tempdir().unwrap();
        symlink(&secret, d.path().join("a.hist.csv")).unwrap();
        let e = read_text_in(d.path(), "a.hist.csv", "results file", 1024).unwrap_err();
        assert!(matches!(e, FileError::OutsideDir { .. }), "{e}");
        assert!(e.to_string().contains("a symlink pointing out of"), "{e}");
        let missing = read_text_in(d.path(), "none", "results file", 1024).unwrap_err();
        assert!(missing.is_not_found(), "{missing}");
    }

    #[test]
    fn the_size_cap_is_held_by_size_and_by_what_is_read() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("big");
        std::fs::write(&p, vec![b'x'; 2048]).unwrap();
        let e = read(&p, "peers file", 1024).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "peers file {} is 2 KiB, more than the 1 KiB allowed",
                p.display()
            )
        );
        assert_eq!(read(&p, "peers file", 2048).unwrap().len(), 2048);
        // /proc files say they are empty: the cap holds by what is read.
        let e = read(Path::new("/proc/self/maps"), "peers file", 8).unwrap_err();
        assert!(matches!(e, FileError::Overflow { max: 8, .. }), "{e}");
        assert_eq!(Bytes(20 << 20).to_string(), "20 MiB");
        assert_eq!(Bytes(1536).to_string(), "1.5 KiB");
        assert_eq!(Bytes(3).to_string(), "3 bytes");
    }

    #[test]
    fn write_replace_leaves_no_temporary_and_replaces_a_hard_link_not_its_inode() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("report.html");
        write_replace(&p, b"one").unwrap();
        let other = d.path().join("other");
        std::fs::hard_link(&p, &other).unwrap();
        write_replace(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read(&other).unwrap(), b"one");
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        // A temporary is created O_EXCL: an existing name is never opened.
        let (mut f, tmp) = fresh_temporary(&p).unwrap();
        f.write_all(b"x").unwrap();
        assert!(open_raw(&tmp, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL).is_err());
        let (_, tmp2) = fresh_temporary(&p).unwrap();
        assert_ne!(tmp, tmp2, "temporary names are not predictable");
        let log = create_replace(&p).unwrap();
        drop(log);
        assert_eq!(std::fs::read(&p).unwrap(), b"");
    }

    #[test]
    fn a_symlink_target_is_refused_and_what_it_points_to_is_unchanged() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let p = d.path().join("report.html");
        symlink(&victim, &p).unwrap();
        let e = write_replace(&p, b"report").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{} is a symbolic link: refusing to write through it (remove it or choose another path)",
                p.display()
            )
        );
        assert!(matches!(
            create_replace(&p).unwrap_err(),
            FileError::SymlinkTarget { .. }
        ));
        assert!(matches!(
            open_append(&p).unwrap_err(),
            FileError::SymlinkTarget { .. }
        ));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }

    /// Witness: the file system — the FIFO and the device node are still what they
    /// were after the refusals.
    #[test]
    fn a_fifo_a_device_or_a_directory_is_refused_not_replaced() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = create_replace(&fifo).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("output file {}: a FIFO, not a regular file", fifo.display())
        );
        assert!(write_replace(&fifo, b"x").is_err());
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        let e = create_replace(d.path()).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        // A device node (/dev/null's numbers), where the test may make one (root).
        let dev = d.path().join("null");
        let c = CString::new(dev.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)) } == 0 {
            assert!(create_replace(&dev).is_err());
            assert!(std::fs::symlink_metadata(&dev)
                .unwrap()
                .file_type()
                .is_char_device());
        }
        // Only what was refused was touched: no temporaries left.
        let n = std::fs::read_dir(d.path()).unwrap().count();
        assert!(n <= 2, "{n} entries");
    }

    #[test]
    fn a_scratch_directory_is_new_private_and_removed() {
        use std::os::unix::fs::PermissionsExt;
        let a = ScratchDir::new("rttlab-test").unwrap();
        let b = ScratchDir::new("rttlab-test").unwrap();
        assert_ne!(a.path(), b.path());
        let m = std::fs::metadata(a.path()).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o700);
        std::fs::write(a.path().join("x"), "1").unwrap();
        let p = a.path().to_owned();
        drop(a);
        assert!(!p.exists());
    }
}
