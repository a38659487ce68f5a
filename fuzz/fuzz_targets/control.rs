//! Control frames from an untrusted peer: `read_msg` never panics nor allocates past
//! the frame limit, a frame that decodes re-encodes to a frame that decodes to the same
//! message, and the server's limit check never panics on any spec a peer can send.
//! Sealed frames (protocol 2): bytes nobody sealed are never accepted, and a message
//! sealed by one end of a session opens at the other and nowhere else.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rttlab::probe::control::{
    read_first_server_msg, read_msg, read_msg_limited, write_msg, ClientMsg, ControlError, Limits,
    Role, ServerMsg, Session, MAX_HANDSHAKE_FRAME,
};
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
        // Forged: the same bytes offered as a sealed frame never open.
        let mut server = Session::derive(b"secret", b"c", b"s", Role::Server);
        assert!(matches!(
            server.read::<_, ClientMsg>(&mut &data[..]),
            Err(ControlError::Forged | ControlError::TooLarge { .. } | ControlError::Io(_))
        ));
        // Sealed by the client, it opens at the server, and not under another key.
        let mut client = Session::derive(b"secret", b"c", b"s", Role::Client);
        let mut sealed = Vec::new();
        client.write(&mut sealed, &m).expect("seals");
        let mut server = Session::derive(b"secret", b"c", b"s", Role::Server);
        assert_eq!(
            server
                .read::<_, ClientMsg>(&mut &sealed[..])
                .expect("opens"),
            m
        );
        let mut other = Session::derive(b"secret", b"c", b"t", Role::Server);
        assert!(other.read::<_, ClientMsg>(&mut &sealed[..]).is_err());
    }
    let _ = read_msg_limited::<_, ClientMsg>(&mut &data[..], MAX_HANDSHAKE_FRAME);
    let _ = read_first_server_msg(&mut &data[..]);
    if let Ok(m) = read_msg::<_, ServerMsg>(&mut &data[..]) {
        let mut buf = Vec::new();
        write_msg(&mut buf, &m).expect("a decoded message re-encodes");
        let back: ServerMsg = read_msg(&mut &buf[..]).expect("and decodes again");
        assert_eq!(back, m);
    }
});
