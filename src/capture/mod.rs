//! Streaming capture readers: pcap and pcapng from any `Read` (a file, stdin), in
//! constant memory — one buffer that holds the current record, refilled in place.
//! Each packet is lent out as a view into that buffer; nothing is allocated per packet.

pub mod buffer;
pub mod expression;
pub mod filter;
pub mod live;
pub mod mapped;
pub mod pcap;
pub mod pcapng;
mod pipelined;
pub mod source;

pub use source::{open, Batch, Capture, Options, Source, SourceError};

use std::io::Read;

/// One captured packet, borrowed from the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Capture timestamp, ns since the Unix epoch.
    pub ts_ns: u64,
    /// The link type number of its interface (pcap LINKTYPE_).
    pub link: u32,
    /// The bytes captured (at most the snap length).
    pub data: &'a [u8],
    /// The length on the wire.
    pub orig_len: u32,
}

/// Why reading stopped.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// A read from the underlying reader failed.
    #[error("reading the capture")]
    Io(#[from] std::io::Error),
    /// The first four bytes, read little-endian, are neither a pcap magic nor a
    /// pcapng Section Header Block type.
    #[error("not a pcap or pcapng file (magic {0:#010x}); convert it with `editcap -F pcap`")]
    NotACapture(u32),
    /// The input holds no byte at all (an empty file, or stdin closed at once).
    #[error("the capture is empty: not even a file header")]
    Empty,
    /// The input ended part-way through a record (a clean end between records is not
    /// an error).
    #[error("the capture ends inside a record at byte {offset} ({why}); the packets before it were read")]
    Truncated {
        /// File offset of the start of the cut-short record.
        offset: u64,
        /// What was being read, e.g. "file header", "record header", "packet data", "block".
        why: &'static str,
    },
    /// A header holds an impossible value (record too large, bad byte-order magic,
    /// bad block length, ...).
    #[error("the capture is corrupt at byte {offset}: {why}; the packets before it were read")]
    Corrupt {
        /// File offset of the record or block whose header is bad.
        offset: u64,
        /// What is wrong, as text (e.g. "block length 7").
        why: String,
    },
    /// The file shrank while it was read (log rotation that truncates, such as
    /// tcpdump's `-C`/`-W` reopening its oldest file).
    #[error("the capture file was cut to {len} bytes while it was read (rotated?); the packets before byte {offset} were read")]
    Cut {
        /// Bytes of the file still readable after the cut (its new size, or the first
        /// mapped page that failed to fault in, whichever is lower).
        len: u64,
        /// File offset of the record being read when the cut was seen.
        offset: u64,
    },
}

/// A pcap or pcapng reader, chosen by the file's magic number.
pub enum CaptureReader<R: Read> {
    /// A classic pcap file (µs or ns timestamps, either byte order).
    Pcap(pcap::PcapReader<R>),
    /// A pcapng file (starts with a Section Header Block).
    Pcapng(pcapng::PcapngReader<R>),
}

impl<R: Read> CaptureReader<R> {
    /// Open `r`, reading its first header.
    ///
    /// # Errors
    /// Neither format, or the header is cut short.
    pub fn new(r: R) -> Result<Self, CaptureError> {
        Self::with_buffer(buffer::Buffer::new(r))
    }

    /// Read a mapped file in place (see [`buffer`]).
    ///
    /// # Errors
    /// As [`Self::new`].
    pub fn mapped(map: mapped::MappedFile) -> Result<Self, CaptureError> {
        Self::with_buffer(buffer::Buffer::mapped(map))
    }

    fn with_buffer(mut b: buffer::Buffer<R>) -> Result<Self, CaptureError> {
        let magic = b.peek_u32_le()?;
        match magic {
            pcapng::SHB_TYPE => Ok(Self::Pcapng(pcapng::PcapngReader::with_buffer(b)?)),
            m if pcap::is_magic(m) => Ok(Self::Pcap(pcap::PcapReader::with_buffer(b)?)),
            m => Err(CaptureError::NotACapture(m)),
        }
    }

    /// `e` (an error [`Self::next_packet`] gave), or the cut of the mapped file that
    /// explains it: a record read past a cut is zeros, which look corrupt.
    pub fn cut_or(&mut self, e: CaptureError) -> CaptureError {
        match self {
            Self::Pcap(p) => p.cut_or(e),
            Self::Pcapng(p) => p.cut_or(e),
        }
    }

    /// The next packet, or `None` at the end.
    ///
    /// # Errors
    /// A read error, a truncated or corrupt record (with its byte offset); one read
    /// past a cut of a mapped file is told by [`Self::cut_or`].
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, CaptureError> {
        match self {
            Self::Pcap(p) => p.next_packet(),
            Self::Pcapng(p) => p.next_packet(),
        }
    }
}
