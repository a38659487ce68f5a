//! The agent's metrics endpoint against any bytes a client can send on one
//! connection: hyper's parser, the body and method refusals, basic authentication
//! and routing, through `agent::http::replay`. Invariants: every answer is an
//! HTTP/1.1 (or, to an HTTP/1.0 request, HTTP/1.0) response with a status the endpoint gives (never a 5xx), no more answers
//! than requests could have been sent, and a request announcing a body is the last
//! one answered on its connection.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rttlab::agent::http::replay;
use rttlab::agent::http::web_config::WebConfig;
use rttlab::agent::metrics::{Buckets, Metrics};
use std::path::Path;
use std::sync::{Arc, OnceLock};

fn metrics() -> &'static Arc<Metrics> {
    static M: OnceLock<Arc<Metrics>> = OnceLock::new();
    M.get_or_init(|| Arc::new(Metrics::new(&"10us:10s:3".parse::<Buckets>().unwrap())))
}

/// User "u", password "p" (bcrypt cost 4, the lowest, so a guess is cheap to fuzz).
fn web_config() -> &'static str {
    static W: OnceLock<String> = OnceLock::new();
    W.get_or_init(|| {
        format!(
            "basic_auth_users:\n  u: '{}'\n",
            bcrypt::hash("p", 4).unwrap()
        )
    })
}

fuzz_target!(|data: &[u8]| {
    // The first byte chooses whether credentials are required.
    let (web, input) = match data.split_first() {
        Some((b, rest)) if b & 1 == 1 => (
            WebConfig::parse(web_config(), Path::new("web.yml"))
                .expect("the fuzz target's own config"),
            rest,
        ),
        Some((_, rest)) => (WebConfig::none(), rest),
        None => (WebConfig::none(), data),
    };
    let out = replay(input, metrics(), web);
    if out.is_empty() {
        return;
    }
    assert!(
        out.starts_with(b"HTTP/1.1 ") || out.starts_with(b"HTTP/1.0 "),
        "{:?}",
        String::from_utf8_lossy(&out[..out.len().min(64)])
    );
    let text = String::from_utf8_lossy(&out);
    let mut answers = 0;
    let starts = text
        .match_indices("HTTP/1.1 ")
        .chain(text.match_indices("HTTP/1.0 "));
    for (i, _) in starts {
        let Some(code) = text.get(i + 9..i + 12) else {
            continue;
        };
        // A status line, not the same bytes inside an exposition or a body.
        if !text[..i].is_empty() && !text[..i].ends_with('\n') {
            continue;
        }
        answers += 1;
        assert!(
            matches!(
                code,
                "200"
                    | "400"
                    | "401"
                    | "404"
                    | "405"
                    | "408"
                    | "413"
                    | "414"
                    | "431"
                    | "501"
                    | "505"
            ),
            "status {code}"
        );
    }
    // Each answer needs a request line's "\n" at least.
    let newlines = input.iter().filter(|&&b| b == b'\n').count();
    assert!(
        answers <= newlines.max(1),
        "{answers} answers to {newlines} lines"
    );
});
