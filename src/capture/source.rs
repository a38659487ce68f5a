//! One front door for packets: a capture file (pcap or pcapng, gzip or not, mapped
//! when it is a regular file), standard input, or a live interface, each handing out
//! `(timestamp ns, LinkType, frame)` alike, a batch at a time.

use super::expression::{Expression, ExpressionError, Program};
use super::filter::Selection;
use super::live::{LiveCapture, LiveError, LiveStats};
use super::mapped::MappedFile;
use super::{CaptureError, CaptureReader};
use crate::wire::LinkType;
use std::io::Read;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Where packets come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A capture file; `-` is standard input.
    File(PathBuf),
    /// A live interface, in a named network namespace if given.
    Interface {
        /// The interface's name, as `ip link` shows it.
        name: String,
        /// The network namespace to capture in (a name in /run/netns, or a path); None:
        /// this process's own.
        netns: Option<String>,
    },
}

/// How a source is opened.
#[derive(Default)]
pub struct Options {
    /// Live: what the kernel keeps ([`super::filter`]); files are read whole.
    pub select: Selection,
    /// A tcpdump filter expression: live, run by the kernel with `select`; for files,
    /// run on each packet before it is handed out ([`super::expression`]).
    pub expression: Option<Expression>,
    /// Live: bytes kept of each frame (0: whole frames).
    pub snaplen: u32,
    /// Files and pipes: called before each read that may wait for input, so that what
    /// was made of the packets so far can be written out first.
    pub before_wait: Option<Box<dyn FnMut()>>,
}

/// What reading a batch gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batch {
    /// This many packets; more may follow.
    More(usize),
    /// The source has ended (a file's end; never for an interface).
    End,
}

/// Why a source could not be opened or read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The capture file could not be opened, or standard input's first read failed.
    #[error("cannot open capture {}", .path.display())]
    Open {
        /// The file asked for (`-`: standard input).
        path: PathBuf,
        /// The error from opening it or from its first read.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a pcap or pcapng capture, or a record in it could not be read.
    #[error("{}", .path.display())]
    Read {
        /// The file being read (`-`: standard input).
        path: PathBuf,
        /// What went wrong in the capture format or the read.
        #[source]
        source: CaptureError,
    },
    /// A packet's link type is not one rttlab can decode.
    #[error("{}: link type {link} is not supported (rttlab reads Ethernet, Linux cooked v1/v2, raw IP, BSD loopback); convert with `editcap -T ether`", .path.display())]
    LinkType {
        /// The file being read (`-`: standard input).
        path: PathBuf,
        /// The packet's LINKTYPE_ number, as the pcap or pcapng header gives it.
        link: u32,
    },
    /// libpcap refused the filter expression for a file's link type.
    #[error(transparent)]
    Expression(#[from] ExpressionError),
    /// The live interface could not be opened for capture.
    #[error(transparent)]
    Live(#[from] LiveError),
    /// Waiting for frames on a live interface failed (poll(2), other than by a signal).
    #[error("reading interface {name}")]
    Poll {
        /// The interface being captured.
        name: String,
        /// The failed system call and its error.
        #[source]
        source: crate::kernel::SyscallError,
    },
}

/// An input that calls a hook before each of its reads.
struct BeforeRead<R> {
    inner: R,
    hook: Option<Box<dyn FnMut()>>,
}

impl<R: Read> Read for BeforeRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(h) = self.hook.as_mut() {
            h();
        }
        self.inner.read(buf)
    }
}

enum Kind {
    File {
        path: PathBuf,
        reader: CaptureReader<Box<dyn Read>>,
        /// The expression's programs, one per link type met so far.
        filter: Option<FileFilter>,
    },
    Live {
        name: String,
        cap: LiveCapture,
    },
}

/// A file's filter: the expression, compiled for each link type when its first packet
/// comes (a pcap file has one; a pcapng file one per interface).
struct FileFilter {
    expression: Expression,
    programs: Vec<(LinkType, Program)>,
}

impl FileFilter {
    /// Whether the expression keeps `frame` of `link`, `wire_len` bytes on the wire.
    #[inline]
    fn keeps(
        &mut self,
        link: LinkType,
        frame: &[u8],
        wire_len: u32,
    ) -> Result<bool, ExpressionError> {
        let i = match self.programs.iter().position(|(l, _)| *l == link) {
            Some(i) => i,
            None => {
                let p = self.expression.compile_for_file(link)?;
                self.programs.push((link, p));
                self.programs.len() - 1
            }
        };
        Ok(self.programs[i].1.matches(frame, wire_len))
    }
}

/// An open source.
pub struct Capture {
    kind: Kind,
}

/// Open `source`.
///
/// # Errors
/// The file cannot be opened or is not a capture; the interface cannot be captured.
pub fn open(source: &Source, opts: Options) -> Result<Capture, SourceError> {
    let kind = match source {
        Source::Interface { name, netns } => Kind::Live {
            name: name.clone(),
            cap: LiveCapture::open_with(
                name,
                netns.as_deref(),
                &opts.select,
                opts.expression.as_ref(),
                opts.snaplen,
            )?,
        },
        Source::File(path) => Kind::File {
            path: path.clone(),
            reader: open_file(path, opts.before_wait)?,
            filter: opts.expression.map(|expression| FileFilter {
                expression,
                programs: Vec::new(),
            }),
        },
    };
    Ok(Capture { kind })
}

/// A capture file or stdin: a regular file is mapped and read in place (guarded
/// against being cut underneath); stdin, pipes and gzip stream.
fn open_file(
    path: &std::path::Path,
    before_wait: Option<Box<dyn FnMut()>>,
) -> Result<CaptureReader<Box<dyn Read>>, SourceError> {
    let open_err = |source| SourceError::Open {
        path: path.to_owned(),
        source,
    };
    let read_err = |source| SourceError::Read {
        path: path.to_owned(),
        source,
    };
    let stdin = path.as_os_str() == "-";
    let file = (!stdin)
        .then(|| std::fs::File::open(path))
        .transpose()
        .map_err(open_err)?;
    let gzip = file.as_ref().is_some_and(|f| {
        let mut peek = [0u8; 2];
        std::os::unix::fs::FileExt::read_at(f, &mut peek, 0).ok() == Some(2) && peek == [0x1f, 0x8b]
    });
    let file = match file {
        Some(f) if !gzip && f.metadata().is_ok_and(|m| m.is_file() && m.len() > 0) => {
            match MappedFile::map(f) {
                Ok(m) => return CaptureReader::mapped(m).map_err(read_err),
                Err(f) => Some(f),
            }
        }
        other => other,
    };
    let raw: Box<dyn Read> = match file {
        Some(f) => Box::new(BeforeRead {
            inner: f,
            hook: before_wait,
        }),
        None => Box::new(BeforeRead {
            inner: std::io::stdin().lock(),
            hook: before_wait,
        }),
    };
    let mut buffered = std::io::BufReader::with_capacity(1 << 16, raw);
    // A gzip-compressed capture (1f 8b) is read through a decompressor.
    let input: Box<dyn Read> = if std::io::BufRead::fill_buf(&mut buffered)
        .map_err(open_err)?
        .starts_with(&[0x1f, 0x8b])
    {
        Box::new(flate2::bufread::MultiGzDecoder::new(buffered))
    } else {
        Box::new(buffered)
    };
    CaptureReader::new(input).map_err(read_err)
}

impl SourceError {
    /// The filter expression's error, if that is what this is (a usage error: the
    /// command line, not the capture, is wrong).
    pub fn expression(&self) -> Option<&ExpressionError> {
        match self {
            Self::Expression(e) | Self::Live(LiveError::Expression(e)) => Some(e),
            _ => None,
        }
    }
}

impl Capture {
    /// A live interface (packets stamped by this host's clock as they arrive).
    pub fn is_live(&self) -> bool {
        matches!(self.kind, Kind::Live { .. })
    }

    /// A live interface's own addresses (empty for files).
    pub fn addresses(&self) -> &[IpAddr] {
        match &self.kind {
            Kind::Live { cap, .. } => &cap.addresses,
            Kind::File { .. } => &[],
        }
    }

    /// A live interface's kernel counters.
    pub fn live_stats(&mut self) -> Option<LiveStats> {
        match &mut self.kind {
            Kind::Live { cap, .. } => Some(cap.stats()),
            Kind::File { .. } => None,
        }
    }

    /// Hand up to `max` packets to `f` as (timestamp ns, link type, frame): a file's
    /// next packets, or a live ring's ready blocks after waiting up to `wait` for one.
    ///
    /// # Errors
    /// A read error, a truncated or corrupt record, a link type rttlab cannot read;
    /// the packets before it were handed out.
    pub fn read(
        &mut self,
        wait: Duration,
        max: usize,
        f: &mut dyn FnMut(u64, LinkType, &[u8]),
    ) -> Result<Batch, SourceError> {
        match &mut self.kind {
            Kind::Live { name, cap } => {
                let link = cap.link();
                let ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
                let n = cap
                    .poll(ms, |ts, frame| f(ts, link, frame))
                    .map_err(|source| SourceError::Poll {
                        name: name.clone(),
                        source,
                    })?;
                Ok(Batch::More(n))
            }
            Kind::File {
                path,
                reader,
                filter,
            } => {
                let mut handed = 0;
                for _ in 0..max {
                    let p = reader.next_packet().map_err(|source| SourceError::Read {
                        path: path.clone(),
                        source,
                    })?;
                    let Some(p) = p else {
                        return Ok(if handed == 0 {
                            Batch::End
                        } else {
                            Batch::More(handed)
                        });
                    };
                    // Built only on failure: an eager `ok_or` cloned the path into
                    // an error for every packet and freed it again (5 % of a run).
                    let link =
                        LinkType::from_number(p.link).ok_or_else(|| SourceError::LinkType {
                            path: path.clone(),
                            link: p.link,
                        })?;
                    if let Some(filter) = filter.as_mut() {
                        if !filter.keeps(link, p.data, p.orig_len)? {
                            continue;
                        }
                    }
                    f(p.ts_ns, link, p.data);
                    handed += 1;
                }
                Ok(Batch::More(handed))
            }
        }
    }
}
