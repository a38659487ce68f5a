//! `--raw-log FILE`: every transaction as one JSON line ([`RAW_SCHEMA`]), as irtt's
//! `-o` and sockperf's `--full-log` keep every packet, written while the run goes
//! rather than kept in memory: each stream fills a buffer of its own and hands it to
//! the file's writer when it is full ([`CHUNK`]) and when the stream ends (a stop by
//! Ctrl-C included), and the run flushes the file at its end.
//!
//! Times are the client's CLOCK_REALTIME taken from its monotonic clock through one
//! pair of readings at the stream's start (Linux slews both clocks alike; only a step
//! of the wall clock would move them apart), so `received_unix_ns − sent_unix_ns` is
//! exactly the round trip the histogram holds. The server's stamps are its kernel's
//! (`SO_TIMESTAMPING`) on its own clock.

use serde::Serialize;
use std::io::Write;
use std::sync::Mutex;

/// The kind of `--raw-log`'s lines (`results::schema::RR_RAW` names it with the others;
/// it is defined here, below them, because the probe writes the file).
pub const RAW_SCHEMA: &str = "rttlab.rr-raw/1";

/// Bytes a stream gathers before it hands them to the file (a few hundred lines).
pub(super) const CHUNK: usize = 64 * 1024;

/// Which way a lost transaction was lost, when the server's count or stamps say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Way {
    /// The request never reached the server (or the server dropped it on purpose).
    Request,
    /// The server received the request; its response never came back.
    Response,
}

/// One transaction of `--raw-log`. A field the run did not measure is null.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub(super) struct RawLine {
    /// The stream (connection) it came from, numbered from 0.
    pub(super) stream: u32,
    /// The stream's transaction number, from 1.
    pub(super) seq: u64,
    /// Just before the request's `send()`, client clock, ns since the Unix epoch.
    pub(super) sent_unix_ns: u64,
    /// The round trip: `sent_unix_ns` → the response's last byte read.
    pub(super) rtt_ns: Option<u64>,
    /// When the response's last byte was read: `sent_unix_ns + rtt_ns`.
    pub(super) received_unix_ns: Option<u64>,
    /// The response's RX stamp on the client (open-loop UDP_RR).
    pub(super) client_rx_unix_ns: Option<u64>,
    /// The request's RX stamp on the server, server clock.
    pub(super) server_rx_unix_ns: Option<u64>,
    /// The response's TX stamp on the server, server clock.
    pub(super) server_tx_unix_ns: Option<u64>,
    /// irtt's send delay: `server_rx_unix_ns − sent_unix_ns` (two clocks; below zero
    /// when they disagree by more than the delay).
    pub(super) send_delay_ns: Option<i64>,
    /// irtt's receive delay: `client_rx_unix_ns − server_tx_unix_ns`.
    pub(super) receive_delay_ns: Option<i64>,
    /// No response came while the client listened.
    pub(super) lost: bool,
    /// UDP: the response came after the request's timeout (a transaction, not lost).
    pub(super) late: bool,
    /// Of a lost one, which way, when the server's stamps or count say.
    pub(super) lost_way: Option<Way>,
}

impl RawLine {
    /// Transaction `seq` of `stream`, sent at `sent_unix_ns` and answered `rtt_ns`
    /// later.
    pub(super) fn answered(stream: u32, seq: u64, sent_unix_ns: u64, rtt_ns: u64) -> Self {
        Self {
            stream,
            seq,
            sent_unix_ns,
            rtt_ns: Some(rtt_ns),
            received_unix_ns: Some(sent_unix_ns.saturating_add(rtt_ns)),
            ..Self::default()
        }
    }

    /// Transaction `seq` of `stream`, sent at `sent_unix_ns` and never answered.
    pub(super) fn lost(stream: u32, seq: u64, sent_unix_ns: u64) -> Self {
        Self {
            stream,
            seq,
            sent_unix_ns,
            lost: true,
            ..Self::default()
        }
    }

    /// Append as one JSON line to `buf`.
    pub(super) fn append_to(&self, buf: &mut Vec<u8>) {
        #[derive(Serialize)]
        struct Line<'a> {
            schema: &'static str,
            #[serde(flatten)]
            l: &'a RawLine,
        }
        // Plain numbers, booleans and one enum: serialization cannot fail.
        let _ = serde_json::to_writer(
            &mut *buf,
            &Line {
                schema: RAW_SCHEMA,
                l: self,
            },
        );
        buf.push(b'\n');
    }
}

/// The file every stream's lines go to.
pub struct RawLog {
    out: Mutex<(std::io::BufWriter<std::fs::File>, Option<std::io::Error>)>,
}

impl RawLog {
    /// Create `path` anew (a fresh file renamed into place: never one a symlink
    /// points to), as `--hdr-log` and `--slow-log` are.
    ///
    /// # Errors
    /// The file cannot be created, or `path` is a symlink.
    pub fn create(path: &std::path::Path) -> Result<Self, crate::kernel::fs::FileError> {
        let f = crate::kernel::fs::create_replace(path)?;
        Ok(Self {
            out: Mutex::new((std::io::BufWriter::with_capacity(CHUNK, f), None)),
        })
    }

    /// Write whole lines (a full disk loses lines, never the run: the first error is
    /// kept for [`Self::finish`]).
    pub(super) fn write(&self, lines: &[u8]) {
        if lines.is_empty() {
            return;
        }
        let mut g = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let (w, err) = &mut *g;
        if err.is_none() {
            if let Err(e) = w.write_all(lines) {
                *err = Some(e);
            }
        }
    }

    /// Write one line now (the lines settled after the streams ended).
    pub(super) fn line(&self, l: &RawLine) {
        let mut buf = Vec::with_capacity(400);
        l.append_to(&mut buf);
        self.write(&buf);
    }

    /// Flush what is buffered.
    ///
    /// # Errors
    /// A write failed, now or earlier in the run.
    pub fn finish(&self) -> std::io::Result<()> {
        let mut g = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let (w, err) = &mut *g;
        match err.take() {
            Some(e) => Err(e),
            None => w.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: the bytes written, parsed back by serde_json.
    #[test]
    fn a_line_is_one_json_object_with_nulls_for_what_was_not_measured() {
        let mut buf = Vec::new();
        RawLine::answered(1, 7, 1_000, 250).append_to(&mut buf);
        let mut lost = RawLine::lost(0, 8, 2_000);
        lost.lost_way = Some(Way::Response);
        lost.append_to(&mut buf);
        let text = String::from_utf8(buf).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["schema"], RAW_SCHEMA);
        assert_eq!(lines[0]["received_unix_ns"], 1_250);
        assert_eq!(lines[0]["rtt_ns"], 250);
        assert!(lines[0]["server_rx_unix_ns"].is_null());
        assert_eq!(lines[0]["lost"], false);
        assert_eq!(lines[1]["lost"], true);
        assert_eq!(lines[1]["lost_way"], "response");
        assert!(lines[1]["rtt_ns"].is_null());
    }
}
