//! A list of routers given to [`Client::connect`]: checked, and shuffled
//! into this client's own order of trying them (as NATS clients do).

use super::{ClientError, RouterUri};

/// The routers of a comma-separated list `uri`, shuffled; empty for one
/// router.
///
/// # Errors
/// [`ClientError::Uri`]: a bad URI, or a list mixing `tcp://` and
/// `tls://`, or naming `ipc` (shared memory reaches one router).
pub(super) fn parse(uri: &str) -> Result<Vec<RouterUri>, ClientError> {
    if !uri.contains(',') {
        return Ok(Vec::new());
    }
    let mut group = uri.split(',').map(|u| u.trim().parse()).collect::<Result<Vec<RouterUri>, _>>()?;
    let tls = group.iter().filter(|u| matches!(u, RouterUri::Tls { .. })).count();
    if group.contains(&RouterUri::Ipc) || (tls != 0 && tls != group.len()) {
        return Err(ClientError::Uri(format!(
            "{uri}: a group's routers are all tcp:// or all tls:// (shared memory reaches one router)"
        )));
    }
    shuffle(&mut group);
    Ok(group)
}

/// Routers a client learns of at most (from its routers' WELCOMEs).
pub(super) const DISCOVERED_MAX: usize = 64;

/// Adds to `group` the routers of `told` (URIs from a WELCOME: the
/// cluster's other routers) of `current`'s scheme and not in it yet,
/// shuffled, after the ones it has (a group of one router, `current`,
/// is made first: `group` is empty for one), and notes them in `learned`.
/// Only the first [`DISCOVERED_MAX`] URIs told are looked at, only those of
/// the client's scheme are parsed (a name is looked up then), and none
/// past [`DISCOVERED_MAX`] learned is taken. Returns how many it added.
pub(super) fn learn(
    group: &mut Vec<RouterUri>,
    current: &RouterUri,
    told: &[String],
    learned: &mut Vec<RouterUri>,
) -> usize {
    let scheme = match current {
        RouterUri::Tcp(_) => "tcp://",
        RouterUri::Tls { .. } => "tls://",
        // Shared memory reaches one router.
        RouterUri::Ipc => return 0,
    };
    let mut new = Vec::new();
    for uri in told.iter().take(DISCOVERED_MAX) {
        if learned.len() + new.len() >= DISCOVERED_MAX {
            break;
        }
        if !uri.starts_with(scheme) {
            continue;
        }
        let Ok(u) = uri.parse::<RouterUri>() else { continue };
        if u != *current && !group.contains(&u) && !new.contains(&u) {
            new.push(u);
        }
    }
    if new.is_empty() {
        return 0;
    }
    if group.is_empty() {
        group.push(current.clone());
    }
    shuffle(&mut new);
    learned.extend(new.iter().cloned());
    let n = new.len();
    group.append(&mut new);
    n
}

/// Shuffles `v` (Fisher-Yates), from the process's random hash keys: each
/// client its own order, so a group's clients spread over its routers.
fn shuffle<T>(v: &mut [T]) {
    use std::hash::{BuildHasher, Hasher};
    let keys = std::collections::hash_map::RandomState::new();
    for i in (1..v.len()).rev() {
        let mut h = keys.build_hasher();
        h.write_usize(i);
        let j = usize::try_from(h.finish() % (i as u64 + 1)).unwrap_or(0);
        v.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Client, ClientOptions};
    use super::*;

    #[test]
    fn routers_told_in_welcome_of_the_clients_scheme_join_its_list_once() {
        let a: RouterUri = "tcp://127.0.0.1:9".parse().unwrap();
        let told = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let (mut group, mut learned) = (Vec::new(), Vec::new());
        let n = learn(
            &mut group,
            &a,
            &told(&["tcp://127.0.0.1:10", "tls://localhost:11", "ipc", "nonsense", "tcp://127.0.0.1:9"]),
            &mut learned,
        );
        // The one it is on, then the one new tcp:// router.
        assert_eq!((n, learned.len()), (1, 1));
        assert_eq!(group, vec![a.clone(), "tcp://127.0.0.1:10".parse().unwrap()]);
        // Told again (another WELCOME): nothing twice.
        assert_eq!(learn(&mut group, &a, &told(&["tcp://127.0.0.1:10"]), &mut learned), 0);
        assert_eq!(group.len(), 2);
        // A TLS client takes only tls:// routers; shared memory none.
        let t: RouterUri = "tls://localhost:11".parse().unwrap();
        let mut tg = Vec::new();
        assert_eq!(learn(&mut tg, &t, &told(&["tcp://127.0.0.1:10", "tls://localhost:12"]), &mut Vec::new()), 1);
        assert_eq!(learn(&mut Vec::new(), &RouterUri::Ipc, &told(&["tcp://127.0.0.1:10"]), &mut Vec::new()), 0);
        // At most DISCOVERED_MAX learned, however many are told.
        let many: Vec<String> = (0..200).map(|p| format!("tcp://127.0.0.1:{}", 1000 + p)).collect();
        let (mut g, mut l) = (Vec::new(), Vec::new());
        learn(&mut g, &a, &many, &mut l);
        assert_eq!((l.len(), g.len()), (DISCOVERED_MAX, DISCOVERED_MAX + 1));
        // Only the first DISCOVERED_MAX told are looked at.
        let mut late = vec!["nonsense".to_owned(); DISCOVERED_MAX];
        late.push("tcp://127.0.0.1:10".into());
        assert_eq!(learn(&mut Vec::new(), &a, &late, &mut Vec::new()), 0);
    }

    #[test]
    fn each_client_tries_a_groups_routers_in_an_order_of_its_own() {
        let list = "tcp://127.0.0.1:9,tcp://127.0.0.1:10,tcp://127.0.0.1:11,tcp://127.0.0.1:12";
        let given: Vec<RouterUri> = list.split(',').map(|u| u.parse().unwrap()).collect();
        let mut firsts = std::collections::BTreeSet::new();
        let mut orders = std::collections::BTreeSet::new();
        for _ in 0..40 {
            let c = Client::connect(list, ClientOptions::default()).unwrap();
            let mut sorted = c.group().to_vec();
            sorted.sort_by_key(ToString::to_string);
            let mut want = given.clone();
            want.sort_by_key(ToString::to_string);
            assert_eq!(sorted, want, "every router once");
            // (The first is tried at once: refused here, `uri` is on to the next.)
            firsts.insert(c.group()[0].to_string());
            orders.insert(c.group().iter().map(ToString::to_string).collect::<Vec<_>>());
        }
        // 40 clients over 24 orders: all on one first router has odds of
        // 4 * (1/4)^40.
        assert!(firsts.len() >= 2 && orders.len() >= 4, "{firsts:?} {orders:?}");
    }
}
