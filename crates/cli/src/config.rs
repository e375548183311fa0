//! `tickwire.toml`: defaults for every command, overridden by flags.
//!
//! ```toml
//! dir = "/dev/shm/tickwire-trader"   # default: /dev/shm/tickwire-USER
//! [log]
//! capacity = "16MiB"
//! mtu = "64k"
//! max_message = "4MiB"
//! max_subscribers = 32
//! unblock_timeout = "5s"
//! ```

use crate::units::{parse_capacity, parse_duration, parse_message_size, parse_mtu};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use tickwire_shm::LogConfig;
use toml::Spanned;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    dir: Option<PathBuf>,
    #[serde(default)]
    log: FileLog,
    /// `tickwire router`'s settings (`tickwire_router::config`).
    router: Option<toml::Table>,
    /// The router's users (`tickwire_router::access`).
    users: Option<toml::Value>,
    /// The router's Prometheus endpoint.
    metrics: Option<FileMetrics>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMetrics {
    listen: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLog {
    capacity: Option<Spanned<String>>,
    mtu: Option<Spanned<String>>,
    max_message: Option<Spanned<String>>,
    max_subscribers: Option<Spanned<usize>>,
    unblock_timeout: Option<Spanned<String>>,
}

/// Parses the value of `[log] key`, naming file, line and key on error.
fn value<T>(
    path: &Path,
    text: &str,
    key: &str,
    v: &Spanned<String>,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<T, String> {
    parse(v.get_ref()).map_err(|e| format!("{}:{}: [log] {key}: {e}", path.display(), line_of(text, v.span().start)))
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

/// Settings after reading the file.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Directory for logs and counters.
    pub dir: PathBuf,
    /// Log defaults.
    pub log: LogConfig,
    /// The `[router]` table and the file it came from.
    pub router: Option<(PathBuf, toml::Table)>,
    /// The `[[users]]` array and the file it came from.
    pub users: Option<(PathBuf, toml::Value)>,
    /// `[metrics] listen`: where the router serves Prometheus metrics.
    pub metrics: Option<String>,
    /// The file read, if any (`tickwire router` reads it again on SIGHUP).
    pub path: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            dir: tickwire_shm::default_dir(),
            log: LogConfig::default(),
            router: None,
            users: None,
            metrics: None,
            path: None,
        }
    }
}

/// The config file a router service reads when none is named.
pub const SYSTEM_CONFIG: &str = "/etc/tickwire/router.toml";

/// [`SYSTEM_CONFIG`] if it exists.
pub fn system_default() -> Option<PathBuf> {
    Path::new(SYSTEM_CONFIG).exists().then(|| PathBuf::from(SYSTEM_CONFIG))
}

/// The line of a dotted key (`router.journal.sync`) in a TOML text, if
/// it is there.
pub fn key_line(text: &str, dotted: &str) -> Option<usize> {
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let mut item = doc.as_item();
    let mut span = None;
    for part in dotted.split('.') {
        let (key, value) = item.as_table_like()?.get_key_value(part)?;
        span = key.span().or_else(|| value.span());
        item = value;
    }
    span.map(|s| line_of(text, s.start))
}

/// The dotted key (`router.limits.queue_bytes`, `users[1].publish`) whose
/// value holds byte `offset` of a TOML text, the innermost if several do.
pub fn key_at(text: &str, offset: usize) -> Option<String> {
    use toml_edit::{Item, Value};
    fn in_value(v: &Value, offset: usize, path: &mut Vec<String>) -> bool {
        match v {
            Value::InlineTable(t) => {
                for (k, v) in t.iter() {
                    path.push(k.to_owned());
                    if in_value(v, offset, path) {
                        return true;
                    }
                    path.pop();
                }
            }
            Value::Array(a) => {
                for (i, v) in a.iter().enumerate() {
                    let Some(last) = path.last_mut() else { break };
                    let cut = last.len();
                    last.push_str(&format!("[{i}]"));
                    if in_value(v, offset, path) {
                        return true;
                    }
                    if let Some(last) = path.last_mut() {
                        last.truncate(cut);
                    }
                }
            }
            _ => {}
        }
        v.span().is_some_and(|s| s.contains(&offset))
    }
    fn in_item(item: &Item, offset: usize, path: &mut Vec<String>) -> bool {
        match item {
            Item::Table(t) => {
                for (k, v) in t.iter() {
                    path.push(k.to_owned());
                    if in_item(v, offset, path) {
                        return true;
                    }
                    path.pop();
                }
                false
            }
            Item::ArrayOfTables(a) => {
                for (i, t) in a.iter().enumerate() {
                    let Some(last) = path.last_mut() else { break };
                    let cut = last.len();
                    last.push_str(&format!("[{i}]"));
                    for (k, v) in t.iter() {
                        path.push(k.to_owned());
                        if in_item(v, offset, path) {
                            return true;
                        }
                        path.pop();
                    }
                    if let Some(last) = path.last_mut() {
                        last.truncate(cut);
                    }
                }
                false
            }
            Item::Value(v) => in_value(v, offset, path),
            Item::None => false,
        }
    }
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let mut path = Vec::new();
    in_item(doc.as_item(), offset, &mut path).then(|| path.join("."))
}

/// An error about `[router]` or `[[users]]` of the file at `path`, with the
/// line of the key it names: the typed parse of the whole text (which
/// knows where each value is) for parse errors, the key's line for a value
/// out of range.
pub fn locate(path: &Path, e: &tickwire_router::config::ConfigError) -> String {
    use tickwire_router::config::ConfigError;
    let Ok(text) = std::fs::read_to_string(path) else { return e.to_string() };
    match e {
        ConfigError::Parse { message, .. } => {
            #[derive(Deserialize)]
            #[allow(dead_code)] // read only for where it fails
            struct Typed {
                router: Option<tickwire_router::RouterConfig>,
                users: Option<Vec<tickwire_router::access::UserConfig>>,
            }
            match toml::from_str::<Typed>(&text) {
                Err(t) => match t.span() {
                    Some(span) => {
                        let line = line_of(&text, span.start);
                        // The key the bad value is under, where the message
                        // names only its table.
                        match key_at(&text, span.start) {
                            Some(key) => format!("{}:{line}: {key}: {}", path.display(), t.message()),
                            None => format!("{}:{line}: {message}", path.display()),
                        }
                    }
                    None => format!("{}: {t}", path.display()),
                },
                Ok(_) => e.to_string(),
            }
        }
        ConfigError::Users(_) => format!("{}: {e}", path.display()),
        ConfigError::Value { key, .. } => {
            let line = key_line(&text, &format!("router.{key}")).or_else(|| key_line(&text, key));
            match line {
                Some(l) => format!("{}:{l}: [router] {e}", path.display()),
                None => format!("{}: [router] {e}", path.display()),
            }
        }
    }
}

/// Reads settings from `path` (or defaults if none).
///
/// # Errors
/// A message naming the file and the bad key.
pub fn load(path: Option<&Path>) -> Result<Settings, String> {
    let mut s = Settings::default();
    let Some(path) = path else { return Ok(s) };
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let f: FileConfig = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(d) = f.dir {
        s.dir = d;
    }
    s.router = f.router.map(|t| (path.to_owned(), t));
    s.users = f.users.map(|u| (path.to_owned(), u));
    s.metrics = f.metrics.map(|m| m.listen);
    s.path = Some(path.to_owned());
    if let Some(v) = &f.log.capacity {
        // Derived defaults (mtu, max_message) shrink to fit a small ring.
        s.log = LogConfig::with_capacity(value(path, &text, "capacity", v, parse_capacity)?);
    }
    if let Some(v) = &f.log.mtu {
        s.log.mtu = value(path, &text, "mtu", v, parse_mtu)?;
    }
    if let Some(v) = &f.log.max_message {
        s.log.max_message = value(path, &text, "max_message", v, |x| parse_message_size(x, 1))?;
    }
    if let Some(v) = &f.log.max_subscribers {
        let n = *v.get_ref();
        if !(1..=1024).contains(&n) {
            let line = line_of(&text, v.span().start);
            return Err(format!("{}:{line}: [log] max_subscribers: {n} is not in 1..=1024", path.display()));
        }
        s.log.max_subscribers = n;
    }
    if let Some(v) = &f.log.unblock_timeout {
        s.log.unblock_timeout = value(path, &text, "unblock_timeout", v, parse_duration)?;
    }
    s.log.validate().map_err(|e| format!("{}: [log]: {e}", path.display()))?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sizes_and_rejects_unknown_keys() {
        let d = std::env::temp_dir().join(format!("twcfg-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("t.toml");
        std::fs::write(&p, "dir = \"/tmp/x\"\n[log]\ncapacity = \"1MiB\"\nmtu = \"4k\"\nunblock_timeout = \"250ms\"\n")
            .unwrap();
        let s = load(Some(&p)).unwrap();
        assert_eq!((s.log.capacity, s.log.mtu), (1 << 20, 4096));
        assert_eq!(s.log.unblock_timeout, std::time::Duration::from_millis(250));
        std::fs::write(&p, "[log]\ncapacitty = \"1MiB\"\n").unwrap();
        assert!(load(Some(&p)).unwrap_err().contains("capacitty"));
        std::fs::write(&p, "[log]\ncapacity = \"1000\"\n").unwrap();
        let e = load(Some(&p)).unwrap_err();
        assert!(e.contains("t.toml:2: [log] capacity") && e.contains("power of two"), "{e}");
        std::fs::write(&p, "\n[log]\nmtu = \"4k\"\nunblock_timeout = \"soon\"\n").unwrap();
        let e = load(Some(&p)).unwrap_err();
        assert!(e.contains("t.toml:4: [log] unblock_timeout") && e.contains("e.g. 100us, 5s"), "{e}");
        std::fs::write(&p, "[log]\nmax_subscribers = 0\n").unwrap();
        assert!(load(Some(&p)).unwrap_err().contains("t.toml:2: [log] max_subscribers: 0 is not in 1..=1024"));
    }

    #[test]
    fn a_value_of_the_wrong_type_is_named_by_its_key() {
        let text = "[router]\nlisten = []\n[router.limits]\nqueue_bytes = \"abc\"\n\n[[users]]\nname = \"a\"\n\n[[users]]\nname = \"b\"\npublish = [\"md\", 7]\nx = { y = 1 }\n";
        let at = |needle: &str| text.find(needle).unwrap();
        assert_eq!(key_at(text, at("\"abc\"")).as_deref(), Some("router.limits.queue_bytes"));
        assert_eq!(key_at(text, at("7]")).as_deref(), Some("users[1].publish[1]"));
        assert_eq!(key_at(text, at("1 }")).as_deref(), Some("users[1].x.y"));
        assert_eq!(key_at(text, at("[router]")), None, "a table header is no value");
        // Through the router's config, as `tickwire router` reports it.
        let d = std::env::temp_dir().join(format!("twcfg-key-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("r.toml");
        std::fs::write(&p, "[router]\nlisten = []\n[router.limits]\nqueue_bytes = \"abc\"\n").unwrap();
        let table: toml::Table = toml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let router = table["router"].as_table().unwrap().clone();
        let e = tickwire_router::RouterConfig::from_table(router, &p, &d).unwrap_err();
        let said = locate(&p, &e);
        assert!(
            said.ends_with("r.toml:4: router.limits.queue_bytes: invalid type: string \"abc\", expected usize"),
            "{said}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
