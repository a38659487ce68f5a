//! One front door for packets: a capture file (pcap or pcapng, gzip or not, mapped
//! when it is a regular file), standard input, or a live interface, each handing out
//! `(timestamp ns, LinkType, frame)` alike, a batch at a time.

use super::expression::{Expression, ExpressionError, Program};
use super::filter::Selection;
use super::live::{LiveCapture, LiveError, LiveStats};
use super::mapped::MappedFile;
use super::pipelined::Pipelined;
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

pub(super) enum Kind {
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
    /// A regular file, read ahead on a thread of its own.
    Pipelined(Pipelined<Result<Batch, SourceError>>),
}

/// A file's filter: the expression, compiled for each link type when its first packet
/// comes (a pcap file has one; a pcapng file one per interface).
pub(super) struct FileFilter {
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
    pub(super) kind: Kind,
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
        // A regular file never waits for input: it is read ahead on a second core.
        Source::File(path)
            if path.as_os_str() != "-" && std::fs::metadata(path).is_ok_and(|m| m.is_file()) =>
        {
            read_ahead(path.clone(), opts.expression)?
        }
        Source::File(path) => file_kind(path.clone(), opts.before_wait, opts.expression)?,
    };
    Ok(Capture { kind })
}

/// A regular file opened and read on a thread of its own ([`Pipelined`]), in the
/// batches a direct read makes.
fn read_ahead(path: PathBuf, expression: Option<Expression>) -> Result<Kind, SourceError> {
    let at = path.clone();
    Pipelined::open(
        move || file_kind(at, None, expression).map(|kind| Capture { kind }),
        Box::new(|file: &mut Capture, max, f| file.read(Duration::ZERO, max, f)),
        |got| matches!(got, Ok(Batch::More(_))),
    )
    .map_err(|source| SourceError::Open { path, source })?
    .map(Kind::Pipelined)
}

pub(super) fn file_kind(
    path: PathBuf,
    before_wait: Option<Box<dyn FnMut()>>,
    expression: Option<Expression>,
) -> Result<Kind, SourceError> {
    Ok(Kind::File {
        reader: open_file(&path, before_wait)?,
        path,
        filter: expression.map(|expression| FileFilter {
            expression,
            programs: Vec::new(),
        }),
    })
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
            Kind::File { .. } | Kind::Pipelined(_) => &[],
        }
    }

    /// A live interface's kernel counters.
    pub fn live_stats(&mut self) -> Option<LiveStats> {
        match &mut self.kind {
            Kind::Live { cap, .. } => Some(cap.stats()),
            Kind::File { .. } | Kind::Pipelined(_) => None,
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
            Kind::Pipelined(p) => p.read(max, f).unwrap_or(Ok(Batch::End)),
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
                    let p = match reader.next_packet() {
                        Ok(p) => p,
                        Err(e) => {
                            return Err(SourceError::Read {
                                path: path.clone(),
                                source: reader.cut_or(e),
                            })
                        }
                    };
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

#[cfg(test)]
mod tests {
    use super::super::expression::Expression;
    use super::{file_kind, Batch, Capture, Kind, Source};
    use std::io::Write;

    /// A pcap file of `n` Ethernet frames of 60 bytes, every third one UDP and the rest
    /// TCP, each frame's bytes telling it apart; `tail` bytes of a cut record after them.
    fn pcap(n: usize, tail: usize) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let mut b = Vec::new();
        for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65_535, 1] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for i in 0..n {
            for v in [i as u32, 0, 60, 60] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            let mut frame = [0u8; 60];
            frame[12..14].copy_from_slice(&[0x08, 0x00]);
            frame[14] = 0x45;
            frame[16..18].copy_from_slice(&46u16.to_be_bytes());
            frame[23] = if i % 3 == 0 { 17 } else { 6 };
            frame[40..48].copy_from_slice(&(i as u64).to_le_bytes());
            b.extend_from_slice(&frame);
        }
        b.extend(std::iter::repeat_n(7u8, tail));
        f.write_all(&b).unwrap();
        f.flush().unwrap();
        f
    }

    /// One read: the frames handed (timestamp, bytes), and how it ended (as text).
    type OneRead = (Vec<(u64, Vec<u8>)>, String);

    /// Every read of `cap` until the end or an error.
    fn reads(mut cap: Capture, max: usize) -> Vec<OneRead> {
        let mut out = Vec::new();
        loop {
            let mut frames = Vec::new();
            let got = cap.read(std::time::Duration::ZERO, max, &mut |ts, _, f| {
                frames.push((ts, f.to_vec()))
            });
            let more = matches!(got, Ok(Batch::More(_)));
            out.push((frames, format!("{got:?}")));
            if !more {
                return out;
            }
        }
    }

    /// The file read ahead on a second thread hands out what one thread reading it
    /// hands out, read for read: the same frames in the same batches, the end or the
    /// error after the same frames. Witness: the direct reader on the same file.
    #[test]
    fn read_ahead_gives_what_reading_directly_gives() {
        let _turn = super::super::mapped::ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let tcp = || Some(Expression::new("tcp").unwrap());
        for (n, tail, filter, max) in [
            (10_000, 0, None, 4096),
            (10_000, 9, None, 4096),
            (10_000, 30, tcp(), 1000),
            (4096, 0, None, 4096),
            (0, 0, None, 4096),
            (1, 0, tcp(), 1),
        ] {
            let f = pcap(n, tail);
            let ahead = super::open(
                &Source::File(f.path().into()),
                super::Options {
                    expression: filter.clone(),
                    ..Default::default()
                },
            )
            .unwrap();
            assert!(matches!(ahead.kind, Kind::Pipelined(_)));
            let direct = Capture {
                kind: file_kind(f.path().into(), None, filter.clone()).unwrap(),
            };
            let (a, d) = (reads(ahead, max), reads(direct, max));
            let handed: usize = d.iter().map(|(f, _)| f.len()).sum();
            let kept = if filter.is_some() {
                n - n.div_ceil(3)
            } else {
                n
            };
            assert_eq!(handed, kept, "{n} {tail}");
            assert_eq!(a, d, "{n} frames, {tail} bytes cut, {max} a read");
        }
    }

    /// A file that is not a capture is refused at the open, as a direct open refuses
    /// it, and the engine that stops early leaves no reader behind (drop joins it).
    #[test]
    fn refusals_come_back_at_the_open_and_an_early_stop_ends_the_reader() {
        let _turn = super::super::mapped::ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"not a capture at all").unwrap();
        let o = super::open(&Source::File(f.path().into()), Default::default());
        let d = file_kind(f.path().into(), None, None);
        assert_eq!(
            format!("{:#}", anyhow::Error::from(o.err().unwrap())),
            format!("{:#}", anyhow::Error::from(d.err().unwrap()))
        );
        let f = pcap(50_000, 0);
        let mut cap = super::open(&Source::File(f.path().into()), Default::default()).unwrap();
        let mut n = 0;
        let got = cap.read(std::time::Duration::ZERO, 100, &mut |_, _, _| n += 1);
        assert_eq!((n, format!("{got:?}")), (100, "Ok(More(100))".into()));
        drop(cap);
    }
}
