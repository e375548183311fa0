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
