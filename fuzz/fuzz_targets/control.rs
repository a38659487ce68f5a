//! Control frames from an untrusted peer: `read_msg` never panics nor allocates past
//! the frame limit, a frame that decodes re-encodes to a frame that decodes to the same
//! message, and the server's limit check never panics on any spec a peer can send.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rttlab::probe::control::{read_msg, write_msg, ClientMsg, Limits, ServerMsg};
use rttlab::probe::server::validate;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = read_msg::<_, ClientMsg>(&mut &data[..]) {
        let mut buf = Vec::new();
        write_msg(&mut buf, &m).expect("a decoded message re-encodes");
        let back: ClientMsg = read_msg(&mut &buf[..]).expect("and decodes again");
        assert_eq!(back, m);
        if let ClientMsg::Start { spec } = &m {
            let _ = validate(spec, &Limits::default());
        }
    }
    if let Ok(m) = read_msg::<_, ServerMsg>(&mut &data[..]) {
        let mut buf = Vec::new();
        write_msg(&mut buf, &m).expect("a decoded message re-encodes");
        let back: ServerMsg = read_msg(&mut &buf[..]).expect("and decodes again");
        assert_eq!(back, m);
    }
});
