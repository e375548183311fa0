//! `xdp=` on a `udp://` channel: its datagrams through AF_XDP
//! (`tickwire-xdp`, cargo feature `xdp`), or the reason they are not.
//!
//! * `xdp=off` (default): kernel UDP sockets.
//! * `xdp=auto`: AF_XDP if it can be set up; otherwise kernel UDP, and the
//!   reason is printed at start-up and counted (`fallbacks` in `tickwire stat`).
//! * `xdp=required`: AF_XDP or the channel does not open, with the reason.
//!
//! `xdp-mode=auto|native|generic` picks where the program runs;
//! `xdp-checksum=verify|strict|skip` what received UDP checksums must be.

use crate::config::DriverError;
use crate::uri::{ChannelUri, UriError};
use tickwire_transport::{Transport, UdpConfig};

/// Whether a channel wants AF_XDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XdpUse {
    /// Kernel UDP sockets.
    #[default]
    Off,
    /// AF_XDP if it can be set up, kernel UDP (with the reason) if not.
    Auto,
    /// AF_XDP or an error.
    Required,
}

/// A channel's AF_XDP settings (`xdp`, `xdp-mode`, `xdp-checksum`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct XdpSettings {
    /// `xdp=`.
    pub want: XdpUse,
    /// `xdp-mode=` (auto, native, generic).
    pub mode: String,
    /// `xdp-checksum=` (verify, strict, skip).
    pub checksum: String,
}

impl XdpSettings {
    /// Reads the keys from a URI.
    ///
    /// # Errors
    /// [`UriError::Value`] naming the key and its value.
    pub fn from_uri(uri: &ChannelUri) -> Result<Self, UriError> {
        let pick = |key: &str, allowed: &[&str], why: &'static str| -> Result<String, UriError> {
            let v = uri.get(key).unwrap_or(allowed[0]);
            if allowed.contains(&v) {
                Ok(v.to_string())
            } else {
                Err(UriError::Value { key: key.into(), value: v.into(), why })
            }
        };
        let want = match pick("xdp", &["off", "auto", "required"], "off, auto or required")?.as_str() {
            "auto" => XdpUse::Auto,
            "required" => XdpUse::Required,
            _ => XdpUse::Off,
        };
        if want != XdpUse::Off && uri.tcp {
            let value = uri.get("xdp").unwrap_or_default().into();
            return Err(UriError::Value { key: "xdp".into(), value, why: "udp:// channels only" });
        }
        Ok(Self {
            want,
            mode: pick("xdp-mode", &["auto", "native", "generic"], "auto, native or generic")?,
            checksum: pick("xdp-checksum", &["verify", "strict", "skip"], "verify, strict or skip")?,
        })
    }
}

/// What opening a channel's socket came to.
pub(crate) struct Opened {
    pub transport: Box<dyn Transport>,
    /// One line for start-up: which path and why.
    pub note: Option<String>,
    /// AF_XDP was asked for (`xdp=auto`) and kernel UDP is used instead.
    pub fell_back: bool,
}

/// Opens the AF_XDP transport for `udp`, or falls back as `settings` say.
pub(crate) fn open(
    settings: &XdpSettings,
    udp: UdpConfig,
    peer: Option<std::net::Ipv4Addr>,
) -> Result<Opened, DriverError> {
    let kernel = |why: String| -> Result<Opened, DriverError> {
        if settings.want == XdpUse::Required {
            return Err(DriverError::Xdp(why));
        }
        let transport = Box::new(tickwire_transport::UdpTransport::open(&udp)?);
        let note = format!("AF_XDP not used ({why}); falling back to kernel UDP sockets (xdp=required stops instead)");
        Ok(Opened { transport, note: Some(note), fell_back: true })
    };
    #[cfg(feature = "xdp")]
    {
        let cfg = tickwire_xdp::XdpConfig {
            udp,
            peer,
            mode: settings.mode.parse().unwrap_or_default(),
            checksum: settings.checksum.parse().unwrap_or_default(),
        };
        match tickwire_xdp::XdpTransport::open(&cfg) {
            Ok(t) => {
                let note = Some(t.describe().to_string());
                Ok(Opened { transport: Box::new(t), note, fell_back: false })
            }
            // Another live tickwire process owns this flow: a kernel socket
            // would receive none of it (the program steers it away), so
            // falling back would lose data silently.
            Err(e @ tickwire_xdp::XdpError::FlowTaken { .. }) => Err(DriverError::Xdp(e.to_string())),
            Err(e) => kernel(e.to_string()),
        }
    }
    #[cfg(not(feature = "xdp"))]
    {
        let _ = peer;
        kernel("this build has no AF_XDP: cargo feature xdp is off".into())
    }
}

/// Whether this build has AF_XDP (the `xdp` feature); without it
/// `xdp=auto` always falls back to kernel UDP and `xdp=required` stops.
pub const BUILT_IN: bool = cfg!(feature = "xdp");

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(uri: &str) -> Result<XdpSettings, UriError> {
        XdpSettings::from_uri(&uri.parse().unwrap())
    }

    #[test]
    fn keys_default_off_and_bad_values_name_their_key() {
        let s = settings("udp://127.0.0.1:4000").unwrap();
        assert_eq!((s.want, s.mode.as_str(), s.checksum.as_str()), (XdpUse::Off, "auto", "verify"));
        let s = settings("udp://127.0.0.1:4000?xdp=required&xdp-mode=generic&xdp-checksum=skip").unwrap();
        assert_eq!((s.want, s.mode.as_str(), s.checksum.as_str()), (XdpUse::Required, "generic", "skip"));
        for (uri, key) in [
            ("udp://127.0.0.1:4000?xdp=yes", "xdp"),
            ("udp://127.0.0.1:4000?xdp=auto&xdp-mode=fast", "xdp-mode"),
            ("udp://127.0.0.1:4000?xdp-checksum=maybe", "xdp-checksum"),
            ("tcp://127.0.0.1:4000?xdp=auto", "xdp"),
        ] {
            match settings(uri) {
                Err(UriError::Value { key: k, .. }) => assert_eq!(k, key, "{uri}"),
                other => panic!("{uri}: {other:?}"),
            }
        }
    }
}
