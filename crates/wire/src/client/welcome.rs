//! A WELCOME's body: the router's name and, to a client of protocol 3 or
//! later in a router cluster, a newline then the URIs where the cluster's
//! other routers take clients, separated by commas (`tcp://10.0.0.2:7600`),
//! as a NATS server's `INFO` tells `connect_urls`. A router's name holds no
//! control character.

/// The body for a router named `name` whose cluster's other routers
/// take clients at `routers` (URIs separated by commas; empty: none).
pub fn body(name: &str, routers: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(name.len() + 1 + routers.len());
    b.extend_from_slice(name.as_bytes());
    if !routers.is_empty() {
        b.push(b'\n');
        b.extend_from_slice(routers.as_bytes());
    }
    b
}

/// A WELCOME body's router name and other routers' URIs (empty: none
/// told); text not UTF-8 is replaced, as a name is only shown.
pub fn split(body: &[u8]) -> (String, Vec<String>) {
    let (name, rest) = match body.iter().position(|&b| b == b'\n') {
        Some(at) => (&body[..at], &body[at + 1..]),
        None => (body, &[][..]),
    };
    let rest = String::from_utf8_lossy(rest);
    let routers = rest.split(',').map(str::trim).filter(|u| !u.is_empty()).map(str::to_owned).collect();
    (String::from_utf8_lossy(name).into_owned(), routers)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_name_alone_or_with_the_other_routers_splits_back() {
        assert_eq!(super::split(&super::body("r1", "")), ("r1".to_owned(), vec![]));
        let b = super::body("r1", "tcp://10.0.0.2:7600,tcp://10.0.0.3:7600");
        assert_eq!(b, b"r1\ntcp://10.0.0.2:7600,tcp://10.0.0.3:7600");
        let want = vec!["tcp://10.0.0.2:7600".to_owned(), "tcp://10.0.0.3:7600".to_owned()];
        assert_eq!(super::split(&b), ("r1".to_owned(), want));
        // A version 2 router's WELCOME, and one with empty entries.
        assert_eq!(super::split(b"old"), ("old".to_owned(), vec![]));
        assert_eq!(super::split(b"r\n,, tcp://a:1 ,"), ("r".to_owned(), vec!["tcp://a:1".to_owned()]));
    }
}
