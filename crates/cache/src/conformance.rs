//! One conformance suite for every [`Tier`]: each check takes a factory making a fresh,
//! empty tier; [`run_all`] runs them all. Backends' tests call it with their own factory
//! (`crates/cache/tests/tiers.rs`), so the in-memory twin, the hot tier, redb and the
//! server-backed tiers are held to the same behaviour.

use std::sync::Arc;
use std::time::Duration;

use crate::{Cache, KeyBuilder, Op, Tier};

/// Makes a fresh, empty tier.
pub type Factory<'a> = dyn FnMut() -> Arc<dyn Tier> + 'a;

/// Runs every check.
pub fn run_all(f: &mut Factory<'_>) {
    roundtrip(f);
    binary_values(f);
    ttl(f);
    tags(f);
    clear_and_usage(f);
    concurrent(f);
    sealed_entries_are_checked(f);
    tenants_never_share(f);
    backfill_keeps_tags(f);
}

fn tags_of(t: &[&str]) -> Vec<String> {
    t.iter().map(|s| s.to_string()).collect()
}

/// Put, get, overwrite, delete.
pub fn roundtrip(f: &mut Factory<'_>) {
    let t = f();
    assert_eq!(t.get("op/a").unwrap(), None);
    t.put("op/a", b"one".to_vec(), None, &[]).unwrap();
    assert_eq!(t.get("op/a").unwrap().as_deref(), Some(&b"one"[..]));
    t.put("op/a", b"two".to_vec(), None, &[]).unwrap();
    assert_eq!(t.get("op/a").unwrap().as_deref(), Some(&b"two"[..]));
    assert!(t.delete("op/a").unwrap());
    assert!(!t.delete("op/a").unwrap());
    assert_eq!(t.get("op/a").unwrap(), None);
}

/// Empty, binary and large values come back exactly.
pub fn binary_values(f: &mut Factory<'_>) {
    let t = f();
    let big: Vec<u8> = (0..(1 << 20)).map(|i| (i * 7 % 251) as u8).collect();
    for (k, v) in [
        ("b/empty", Vec::new()),
        ("b/bin", vec![0, 255, 0, 10, 13]),
        ("b/big", big),
    ] {
        t.put(k, v.clone(), None, &[]).unwrap();
        assert_eq!(t.get(k).unwrap(), Some(v), "{k}");
    }
}

/// An entry with a TTL is gone after it; one without stays.
pub fn ttl(f: &mut Factory<'_>) {
    let t = f();
    t.put(
        "t/short",
        b"x".to_vec(),
        Some(Duration::from_millis(1100)),
        &[],
    )
    .unwrap();
    t.put("t/long", b"y".to_vec(), None, &[]).unwrap();
    assert!(t.get("t/short").unwrap().is_some());
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(t.get("t/short").unwrap(), None);
    assert!(t.get("t/long").unwrap().is_some());
}

/// Deleting a tag drops exactly the entries carrying it, now.
pub fn tags(f: &mut Factory<'_>) {
    let t = f();
    t.put("g/1", b"1".to_vec(), None, &tags_of(&["c:a", "op:x"]))
        .unwrap();
    t.put("g/2", b"2".to_vec(), None, &tags_of(&["c:a"]))
        .unwrap();
    t.put("g/3", b"3".to_vec(), None, &tags_of(&["c:b", "op:x"]))
        .unwrap();
    t.put("g/4", b"4".to_vec(), None, &[]).unwrap();
    assert_eq!(t.delete_tag("c:a").unwrap(), 2);
    assert_eq!(t.get("g/1").unwrap(), None);
    assert_eq!(t.get("g/2").unwrap(), None);
    assert!(t.get("g/3").unwrap().is_some());
    assert!(t.get("g/4").unwrap().is_some());
    assert_eq!(t.delete_tag("c:a").unwrap(), 0);
    assert_eq!(t.delete_tag("nope").unwrap(), 0);
    // An overwrite replaces the tags: the old tag no longer reaches it.
    t.put("g/3", b"3b".to_vec(), None, &tags_of(&["c:c"]))
        .unwrap();
    assert_eq!(t.delete_tag("c:b").unwrap(), 0);
    assert!(t.get("g/3").unwrap().is_some());
    assert_eq!(t.delete_tag("c:c").unwrap(), 1);
    assert_eq!(t.get("g/3").unwrap(), None);
    // A deleted entry's tags go with it.
    t.put("g/5", b"5".to_vec(), None, &tags_of(&["c:d"]))
        .unwrap();
    t.delete("g/5").unwrap();
    assert_eq!(t.delete_tag("c:d").unwrap(), 0);
}

/// Clear drops everything; usage counts what is held.
pub fn clear_and_usage(f: &mut Factory<'_>) {
    let t = f();
    for i in 0..10 {
        t.put(&format!("u/{i}"), vec![1; 100], None, &[]).unwrap();
    }
    let u = t.usage().unwrap();
    assert_eq!(u.entries, 10, "{u:?}");
    assert!(u.bytes >= 1000, "{u:?}");
    assert_eq!(t.clear().unwrap(), 10);
    assert_eq!(t.get("u/3").unwrap(), None);
    assert_eq!(t.usage().unwrap().entries, 0);
    // Usable after a clear.
    t.put("u/x", b"x".to_vec(), None, &[]).unwrap();
    assert!(t.get("u/x").unwrap().is_some());
}

/// Threads writing and reading their own keys see their own values.
pub fn concurrent(f: &mut Factory<'_>) {
    let t = f();
    std::thread::scope(|s| {
        for w in 0..4 {
            let t = t.clone();
            s.spawn(move || {
                for i in 0..25 {
                    let k = format!("w{w}/{i}");
                    let v = format!("{w}:{i}").into_bytes();
                    t.put(&k, v.clone(), None, &[format!("w:{w}")]).unwrap();
                    assert_eq!(t.get(&k).unwrap(), Some(v));
                }
            });
        }
    });
    assert_eq!(t.delete_tag("w:2").unwrap(), 25);
    assert!(t.get("w1/24").unwrap().is_some());
}

/// Through a [`Cache`]: damaged, truncated and foreign bytes in the tier are misses,
/// counted, and dropped.
pub fn sealed_entries_are_checked(f: &mut Factory<'_>) {
    let t = f();
    let cache = Cache::new(Some(t.clone()), None);
    let key = KeyBuilder::new("acme", Op::Llm).str("prompt").finish();
    cache.put(&key, b"a completion", None, &[]);
    let sk = key.storage_key();
    let good = t.get(&sk).unwrap().unwrap();
    assert_eq!(cache.get(&key).unwrap().value, b"a completion");
    for bad in [
        good[..good.len() - 1].to_vec(),
        {
            let mut b = good.clone();
            let last = b.len() - 1;
            b[last] ^= 1;
            b
        },
        b"foreign bytes".to_vec(),
        Vec::new(),
    ] {
        t.put(&sk, bad, None, &[]).unwrap();
        assert!(cache.get(&key).is_none());
    }
    let stats = cache.stats();
    let llm = stats.ops.iter().find(|o| o.op == "llm").unwrap();
    assert_eq!(llm.corrupt, 4, "{llm:?}");
    assert_eq!(llm.hot_hits, 1, "{llm:?}");
}

/// Two tenants asking the same thing hold two entries; clearing one tenant's tag keeps
/// the other's.
pub fn tenants_never_share(f: &mut Factory<'_>) {
    let t = f();
    let cache = Cache::new(Some(t), None);
    let key = |tenant: &str| {
        KeyBuilder::new(tenant, Op::Answer)
            .str("same question")
            .finish()
    };
    cache.put(&key("acme"), b"acme's", None, &[crate::tenant_tag("acme")]);
    assert!(cache.get(&key("globex")).is_none());
    cache.put(
        &key("globex"),
        b"globex's",
        None,
        &[crate::tenant_tag("globex")],
    );
    assert_eq!(cache.get(&key("acme")).unwrap().value, b"acme's");
    assert_eq!(cache.delete_tag(&crate::tenant_tag("acme")), 1);
    assert!(cache.get(&key("acme")).is_none());
    assert_eq!(cache.get(&key("globex")).unwrap().value, b"globex's");
}

/// A value found only in the cold tier (this tier) is copied into the hot tier with its
/// tags: deleting by tag afterwards drops both copies.
pub fn backfill_keeps_tags(f: &mut Factory<'_>) {
    let cold = f();
    let hot: Arc<dyn Tier> = Arc::new(crate::MemoryTier::new());
    let key = KeyBuilder::new("acme", Op::Search).str("q").finish();
    Cache::new(None, Some(cold.clone())).put(&key, b"hits", None, &["c:docs".into()]);
    let both = Cache::new(Some(hot.clone()), Some(cold));
    let first = both.get(&key).unwrap();
    assert_eq!(
        (first.value.as_slice(), first.tier),
        (&b"hits"[..], cold_name(&both))
    );
    let again = both.get(&key).unwrap();
    assert_eq!(again.tier, "memory");
    assert!(hot.get(&key.storage_key()).unwrap().is_some());
    assert_eq!(both.delete_tag("c:docs"), 2);
    assert!(both.get(&key).is_none());
    let s = both.stats();
    let search = s.ops.iter().find(|o| o.op == "search").unwrap();
    assert_eq!(
        (search.cold_hits, search.hot_hits, search.misses),
        (1, 1, 1)
    );
}

/// For a tier bounded to 50,000 bytes (not part of [`run_all`]: the bound is each
/// tier's own setting): 200 entries of 1,000 bytes leave it within the bound, the oldest
/// gone with their tags, and a value larger than the bound is not kept.
pub fn stays_within_50k_bytes_dropping_the_oldest(t: &dyn Tier) {
    for i in 0..200 {
        t.put(&format!("k/{i:03}"), vec![7; 1000], None, &["all".into()])
            .unwrap();
    }
    let u = t.usage().unwrap();
    assert!(u.bytes <= 50_000, "{u:?}");
    assert!(u.evictions >= 150, "{u:?}");
    assert!(t.get("k/000").unwrap().is_none());
    assert!(t.get("k/199").unwrap().is_some());
    // Evicted entries' tags went with them.
    assert_eq!(t.delete_tag("all").unwrap() as u64, u.entries);
    t.put("huge", vec![0; 60_000], None, &[]).unwrap();
    assert!(t.get("huge").unwrap().is_none());
}

fn cold_name(c: &Cache) -> &'static str {
    c.stats()
        .tiers
        .iter()
        .find(|t| t.role == "cold")
        .map_or("", |t| t.name)
}
