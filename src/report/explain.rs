//! Sentences that explain one layer by another, shared by every command that shows
//! both (`compare`'s explanations, `rr`'s notes under its tcp_info table).

/// Why the server's srtt can read far above the client's: its response is
/// acknowledged only by the client's next request, `wait_us` later (`wait` names
/// that wait as the command's user set it: "the interval", "-w"), or by the
/// delayed-ACK timer (40 ms on Linux), so the server's TCP times the client's think
/// time too (Jones, A Brief Look at Round Trip Time); with a short wait the next
/// request carries the ACK at once and the two estimates agree.
pub fn server_srtt(client_us: f64, server_us: f64, wait_us: f64, wait: &str) -> String {
    let gap = server_us - client_us;
    if server_us > client_us * 1.2 && gap > 0.3 * wait_us.min(40_000.0) {
        format!(
            "delayed ACK: the server's srtt ({server_us:.0} µs) is {gap:.0} µs above the client's ({client_us:.0} µs). The server's response is ACKed only by the client's next request, {:.0} ms later ({wait}), or by the delayed-ACK timer (40 ms on Linux), whichever comes first, so the server's TCP times the client's think time too (Jones, A Brief Look at Round Trip Time).",
            wait_us / 1e3
        )
    } else {
        format!(
            "tcp_info: client srtt {client_us:.0} µs, server {server_us:.0} µs: with {:.0} ms between a response and the next request ({wait}), both ends' ACKs ride on the next message, so TCP's estimates agree.",
            wait_us / 1e3
        )
    }
}
