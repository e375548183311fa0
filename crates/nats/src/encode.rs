//! What a NATS server sends, appended to a caller's buffer (the
//! connection's queue): no allocation beyond that buffer's growth.

use serde::Serialize;
use std::io::Write;

/// `INFO`: what the server tells a client on connecting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Info {
    /// The server's id.
    pub server_id: String,
    /// Its name.
    pub server_name: String,
    /// The NATS server version it answers as (clients check features by
    /// it: 2.2 and later has headers and no responders).
    pub version: String,
    /// Protocol level.
    pub proto: u32,
    /// Where it listens.
    pub host: String,
    /// See `host`.
    pub port: u16,
    /// It takes `HPUB` and sends `HMSG`.
    pub headers: bool,
    /// Largest payload it takes, bytes.
    pub max_payload: usize,
    /// This connection's id.
    pub client_id: u64,
    /// A user and password, or a token, is needed.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub auth_required: bool,
    /// TLS is needed.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tls_required: bool,
    /// Where the cluster's other servers take NATS clients (`host:port`):
    /// clients add them to the servers they reconnect to.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub connect_urls: Vec<String>,
}

/// The header block of a no-responders status message.
pub const NO_RESPONDERS: &[u8] = b"NATS/1.0 503\r\n\r\n";

/// Appends `INFO {json}`.
pub fn info(out: &mut Vec<u8>, i: &Info) {
    out.extend_from_slice(b"INFO ");
    // Serialising plain strings and numbers into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, i);
    out.extend_from_slice(b"\r\n");
}

/// Appends `MSG subject sid [reply] size` and the payload.
pub fn msg(out: &mut Vec<u8>, subject: &str, sid: &str, reply: Option<&str>, payload: &[u8]) {
    out.extend_from_slice(b"MSG ");
    line(out, subject, sid, reply);
    let _ = write!(out, "{}\r\n", payload.len());
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
}

/// Appends `HMSG subject sid [reply] hsize size`, the headers and the
/// payload (`headers` a whole block, from `NATS/1.0` to its blank line).
pub fn hmsg(out: &mut Vec<u8>, subject: &str, sid: &str, reply: Option<&str>, headers: &[u8], payload: &[u8]) {
    out.extend_from_slice(b"HMSG ");
    line(out, subject, sid, reply);
    let _ = write!(out, "{} {}\r\n", headers.len(), headers.len() + payload.len());
    out.extend_from_slice(headers);
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
}

fn line(out: &mut Vec<u8>, subject: &str, sid: &str, reply: Option<&str>) {
    out.extend_from_slice(subject.as_bytes());
    out.push(b' ');
    out.extend_from_slice(sid.as_bytes());
    out.push(b' ');
    if let Some(r) = reply {
        out.extend_from_slice(r.as_bytes());
        out.push(b' ');
    }
}

/// Appends `+OK`.
pub fn ok(out: &mut Vec<u8>) {
    out.extend_from_slice(b"+OK\r\n");
}

/// Appends `PING`.
pub fn ping(out: &mut Vec<u8>) {
    out.extend_from_slice(b"PING\r\n");
}

/// Appends `PONG`.
pub fn pong(out: &mut Vec<u8>) {
    out.extend_from_slice(b"PONG\r\n");
}

/// Appends `-ERR 'why'` (quotes and line ends in `why` made harmless).
pub fn err(out: &mut Vec<u8>, why: &str) {
    out.extend_from_slice(b"-ERR '");
    out.extend(why.bytes().map(|b| if matches!(b, b'\'' | b'\r' | b'\n') { b' ' } else { b }));
    out.extend_from_slice(b"'\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_server_operation_is_spelled_as_nats_clients_read_it() {
        let mut b = Vec::new();
        msg(&mut b, "md.eu", "1", None, b"hi");
        msg(&mut b, "md.eu", "1", Some("_INBOX.a.b"), b"");
        hmsg(&mut b, "x", "2", Some("r"), NO_RESPONDERS, b"");
        ok(&mut b);
        err(&mut b, "it's\r\nbad");
        assert_eq!(
            String::from_utf8(b).unwrap(),
            "MSG md.eu 1 2\r\nhi\r\nMSG md.eu 1 _INBOX.a.b 0\r\n\r\nHMSG x 2 r 16 16\r\nNATS/1.0 503\r\n\r\n\r\n\
             +OK\r\n-ERR 'it s  bad'\r\n"
        );
        let mut b = Vec::new();
        let i = Info {
            server_id: "tw".into(),
            server_name: "r".into(),
            version: "2.10.0".into(),
            proto: 1,
            host: "127.0.0.1".into(),
            port: 4222,
            headers: true,
            max_payload: 1024,
            client_id: 3,
            auth_required: false,
            tls_required: false,
            connect_urls: Vec::new(),
        };
        info(&mut b, &i);
        let text = String::from_utf8(b).unwrap();
        assert!(text.starts_with("INFO {\"server_id\":\"tw\"") && text.ends_with("}\r\n"), "{text}");
        assert!(!text.contains("auth_required") && !text.contains("connect_urls"), "{text}");
        let mut b = Vec::new();
        info(&mut b, &Info { connect_urls: vec!["10.0.0.2:4222".into()], ..i });
        assert!(String::from_utf8(b).unwrap().contains(r#""connect_urls":["10.0.0.2:4222"]"#));
    }
}
