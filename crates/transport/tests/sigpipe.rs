//! A write to a connection whose peer has gone fails with an error and
//! never raises SIGPIPE: `tickwire` (the router among its commands)
//! restores SIGPIPE's default action, death, so that `tickwire stat | head`
//! ends quietly; a router writing to a client or another router that has
//! just died must live. This binary restores the default too: before the
//! fix it died of the signal here.

use std::io::{IoSlice, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};
use tickwire_transport::tls::Wire;

#[test]
fn writing_to_a_peer_that_has_gone_is_an_error_not_a_sigpipe() {
    // SAFETY: installing SIG_DFL runs no handler and touches no memory of
    // ours; this binary holds this one test.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    drop(s);
    c.set_nonblocking(true).unwrap();
    let mut wire = &Wire::plain(c);
    let block = [7u8; 4096];
    let until = Instant::now() + Duration::from_secs(5);
    // The first write may be taken (the peer's RST not yet seen); one
    // after the reset must fail, with EPIPE or ECONNRESET.
    let err = loop {
        match wire.write_vectored(&[IoSlice::new(&block), IoSlice::new(&block)]) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => break e,
            Ok(_) => {}
        }
        assert!(Instant::now() < until, "writes to a closed peer kept succeeding");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(matches!(err.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset), "{err}");
}
