//! Streaming capture readers: pcap and pcapng from any `Read` (a file, stdin), in
//! constant memory — one buffer that holds the current record, refilled in place.
//! Each packet is lent out as a view into that buffer; nothing is allocated per packet.

pub mod buffer;
pub mod filter;
pub mod live;
pub mod mapped;
pub mod pcap;
pub mod pcapng;
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
    #[error("reading the capture")]
    Io(#[from] std::io::Error),
    #[error("not a pcap or pcapng file (magic {0:#010x}); convert it with `editcap -F pcap`")]
    NotACapture(u32),
    #[error("the capture ends inside a record at byte {offset} ({why}); the packets before it were read")]
    Truncated { offset: u64, why: &'static str },
    #[error("the capture is corrupt at byte {offset}: {why}; the packets before it were read")]
    Corrupt { offset: u64, why: String },
    /// The file shrank while it was read (log rotation that truncates, such as
    /// tcpdump's `-C`/`-W` reopening its oldest file).
    #[error("the capture file was cut to {len} bytes while it was read (rotated?); the packets before byte {offset} were read")]
    Cut { len: u64, offset: u64 },
}

/// A pcap or pcapng reader, chosen by the file's magic number.
pub enum CaptureReader<R: Read> {
    Pcap(pcap::PcapReader<R>),
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

    /// The next packet, or `None` at the end.
    ///
    /// # Errors
    /// A read error, a truncated or corrupt record (with its byte offset).
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, CaptureError> {
        match self {
            Self::Pcap(p) => p.next_packet(),
            Self::Pcapng(p) => p.next_packet(),
        }
    }
}
