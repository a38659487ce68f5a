//! A capture file mapped for reading that survives being cut underneath.
//!
//! A mapped file that another process truncates (tcpdump's `-C`/`-W` rotation reopens
//! its oldest file with `O_TRUNC`) loses its pages past the new end, and touching one
//! raises SIGBUS, which kills the reader. So while a file is mapped here, a SIGBUS
//! handler looks at the faulting address: inside the mapping, it maps an anonymous
//! zero page over the faulting page (`mmap(MAP_FIXED)`, async-signal-safe), notes the
//! page's offset and returns, and the faulting load reads zeros instead. The reader
//! touches each record's pages before handing the record out and then asks
//! [`MappedFile::fault_offset`], so no zero-filled record is ever used: it asks the
//! file's current size (`fstat`) and stops there with a "cut" error, keeping what it
//! read. A fault anywhere else is not ours: the previous action is put back and the
//! fault repeats under it (Rust's own stack-overflow handler included).
//!
//! Only one file is guarded at a time (the handler has one region); [`MappedFile::map`]
//! returns `None` while another is mapped, and the caller reads with `read(2)` instead.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

/// The guarded region: start address and length (0: none).
static REGION_START: AtomicUsize = AtomicUsize::new(0);
static REGION_LEN: AtomicUsize = AtomicUsize::new(0);
/// Offset of the first page that faulted in the region (`usize::MAX`: none).
static FAULT_OFFSET: AtomicUsize = AtomicUsize::new(usize::MAX);
static PAGE: AtomicUsize = AtomicUsize::new(4096);
/// Set while a file is guarded.
static IN_USE: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();
/// The action SIGBUS had before ours, restored for faults that are not ours.
static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::zeroed();

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let start = REGION_START.load(Ordering::SeqCst);
    let len = REGION_LEN.load(Ordering::SeqCst);
    if len != 0 && addr >= start && addr < start + len {
        let page = PAGE.load(Ordering::SeqCst);
        let at = addr & !(page - 1);
        // SAFETY: `at` is a page of our own mapping; replacing it with an anonymous
        // read-only page is what this handler is for. mmap is async-signal-safe.
        let p = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            FAULT_OFFSET.fetch_min(at - start, Ordering::SeqCst);
            return;
        }
    }
    // Not ours (or the page could not be replaced): restore the previous action and
    // return, so that the fault repeats under it.
    // SAFETY: PREVIOUS was filled by sigaction before this handler was installed.
    unsafe {
        libc::sigaction(
            sig,
            std::ptr::addr_of!(PREVIOUS).cast(),
            std::ptr::null_mut(),
        );
    }
}

fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sysconf has no preconditions; sigaction gets valid structs, and
        // PREVIOUS is written here once, before the handler that reads it exists.
        unsafe {
            let p = libc::sysconf(libc::_SC_PAGESIZE);
            if p > 0 {
                PAGE.store(p as usize, Ordering::SeqCst);
            }
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_sigbus as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(libc::SIGBUS, &act, std::ptr::addr_of_mut!(PREVIOUS).cast());
        }
    });
}

/// A read-only mapping of a whole file, guarded against the file being cut.
pub struct MappedFile {
    map: memmap2::Mmap,
    file: File,
}

impl MappedFile {
    /// Map `file`; the file back when it is empty, cannot be mapped, or another file
    /// is mapped here already (read it with `read(2)` then).
    ///
    /// # Errors
    /// The file is handed back unmapped.
    pub fn map(file: File) -> Result<Self, File> {
        if IN_USE.swap(true, Ordering::SeqCst) {
            return Err(file);
        }
        install();
        // SAFETY: read-only mapping; pages the file loses while mapped are caught by
        // the SIGBUS handler above instead of killing the process.
        let map = match unsafe { memmap2::Mmap::map(&file) } {
            Ok(m) if !m.is_empty() => m,
            _ => {
                IN_USE.store(false, Ordering::SeqCst);
                return Err(file);
            }
        };
        FAULT_OFFSET.store(usize::MAX, Ordering::SeqCst);
        REGION_START.store(map.as_ptr() as usize, Ordering::SeqCst);
        REGION_LEN.store(map.len(), Ordering::SeqCst);
        Ok(Self { map, file })
    }

    /// The mapping.
    #[inline]
    pub fn map_ref(&self) -> &memmap2::Mmap {
        &self.map
    }

    /// The offset of the first page found cut, if any.
    #[inline]
    pub fn fault_offset(&self) -> Option<usize> {
        let f = FAULT_OFFSET.load(Ordering::SeqCst);
        (f != usize::MAX).then_some(f)
    }

    /// The file's size now (`fstat`), at most the mapping's length.
    pub fn current_len(&self) -> usize {
        // SAFETY: stat is plain data; fstat gets a valid fd and out-pointer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let rc = unsafe { libc::fstat(self.file.as_raw_fd(), &mut st) };
        if rc != 0 {
            return self.map.len();
        }
        usize::try_from(st.st_size).unwrap_or(0).min(self.map.len())
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        REGION_LEN.store(0, Ordering::SeqCst);
        REGION_START.store(0, Ordering::SeqCst);
        IN_USE.store(false, Ordering::SeqCst);
    }
}

/// Whether any page of the guarded file has faulted (one load: the readers' fast path).
#[inline]
pub fn fault_seen() -> bool {
    FAULT_OFFSET.load(Ordering::Relaxed) != usize::MAX
}

/// The page size (read when the first file is mapped; 4096 before).
#[inline]
pub fn page_size() -> usize {
    PAGE.load(Ordering::Relaxed)
}

/// Touch one byte of every page of `bytes` (a volatile load each, so the compiler
/// keeps them): a cut page faults here, before the bytes are used.
#[inline]
pub fn touch(bytes: &[u8]) {
    let page = PAGE.load(Ordering::Relaxed);
    let mut i = 0;
    while i < bytes.len() {
        // SAFETY: i < len: inside the slice.
        unsafe { std::ptr::read_volatile(bytes.as_ptr().add(i)) };
        i += page - ((bytes.as_ptr() as usize + i) & (page - 1));
    }
    if let Some(last) = bytes.last() {
        // SAFETY: a reference to a byte of the slice.
        unsafe { std::ptr::read_volatile(last) };
    }
}

/// One guarded mapping per process: unit tests that map a file take turns.
#[cfg(test)]
pub(super) static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use crate::capture::{CaptureError, CaptureReader};
    use std::io::Write;

    /// A pcap file of `n` Ethernet records of 64 bytes each (80 with the header).
    fn pcap(n: usize) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let mut hdr = Vec::new();
        hdr.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        hdr.extend_from_slice(&2u16.to_le_bytes());
        hdr.extend_from_slice(&4u16.to_le_bytes());
        hdr.extend_from_slice(&[0; 8]);
        hdr.extend_from_slice(&65535u32.to_le_bytes());
        hdr.extend_from_slice(&1u32.to_le_bytes());
        f.write_all(&hdr).unwrap();
        for i in 0..n {
            let mut r = Vec::with_capacity(80);
            r.extend_from_slice(&(i as u32).to_le_bytes());
            r.extend_from_slice(&0u32.to_le_bytes());
            r.extend_from_slice(&64u32.to_le_bytes());
            r.extend_from_slice(&64u32.to_le_bytes());
            r.extend_from_slice(&[0xab; 64]);
            f.write_all(&r).unwrap();
        }
        f.flush().unwrap();
        f
    }

    /// Read until the end or an error; the packets' first bytes must never be zeros
    /// (every record written is 0xab: a zero byte is a cut page read as data).
    fn drain(r: &mut CaptureReader<std::io::Empty>) -> (usize, Option<CaptureError>) {
        let mut n = 0;
        loop {
            match r.next_packet() {
                Ok(Some(p)) => {
                    assert!(p.data.iter().all(|&b| b == 0xab), "packet {n} read zeros");
                    n += 1;
                }
                Ok(None) => return (n, None),
                Err(e) => return (n, Some(e)),
            }
        }
    }

    /// The witness is arithmetic: a file cut at byte S keeps exactly the records that
    /// end at or before S, and the reader says where it was cut.
    #[test]
    fn a_file_cut_while_mapped_ends_at_the_cut_without_sigbus() {
        let _turn = super::ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // 100_024: a record boundary inside a page the reader touched before the cut
        // (it touches 64 KiB ahead): no fault, the page's tail reads as zeros.
        for cut in [400_001u64, 393_216, 24, 0, 800_023, 100_024] {
            let f = pcap(10_000);
            let file = std::fs::File::open(f.path()).unwrap();
            let m = super::MappedFile::map(file).unwrap();
            let mut r = CaptureReader::mapped(m).unwrap();
            let mut read = 0;
            for _ in 0..1000 {
                assert!(r.next_packet().unwrap().is_some());
                read += 1;
            }
            f.as_file().set_len(cut).unwrap();
            let (more, err) = drain(&mut r);
            read += more;
            let whole = if cut < 24 {
                1000
            } else {
                ((cut - 24) / 80) as usize
            };
            assert_eq!(read, whole.max(1000), "cut at {cut}");
            match err {
                Some(CaptureError::Cut { len, .. }) => assert_eq!(len, cut),
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_uncut_file_reads_to_its_end_and_only_one_is_mapped_at_a_time() {
        let _turn = super::ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let f = pcap(3000);
        let m = super::MappedFile::map(std::fs::File::open(f.path()).unwrap()).unwrap();
        assert!(super::MappedFile::map(std::fs::File::open(f.path()).unwrap()).is_err());
        let mut r = CaptureReader::mapped(m).unwrap();
        let (n, err) = drain(&mut r);
        assert_eq!((n, err.is_none()), (3000, true));
    }
}
