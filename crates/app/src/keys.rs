//! Tenants and API keys, in `<data dir>/auth.redb`, or (with the documents on
//! PostgreSQL) in the store's schema, where every replica finds the same ones.
//!
//! A key is `nck_<prefix>_<secret>`: 8 hex characters that name it (shown by `keys
//! list`, used to revoke it) and 48 of secret, 28 random bytes in all from the operating
//! system. Only the SHA-256 of the whole key is stored, so the key is shown once, when it
//! is created; a request's key is looked up by its prefix and compared by hash in
//! constant time. Each key belongs to one tenant and has a scope: `read` (search, ask,
//! list), `write` (also ingest, delete, memory changes) or `admin` (also tenants and
//! keys).

use std::path::Path;

use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{AppError, Tenant};
use neuralcore_memory::now_ms;

const TENANTS: TableDefinition<&str, &[u8]> = TableDefinition::new("tenants");
const KEYS: TableDefinition<&str, &[u8]> = TableDefinition::new("keys");

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Search, ask, list and read.
    Read,
    /// Also ingest, delete, and change memories.
    Write,
    /// Also manage tenants and keys.
    Admin,
}

impl Scope {
    /// The name `--scope` takes.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
        }
    }
}

impl std::str::FromStr for Scope {
    type Err = AppError;
    fn from_str(s: &str) -> Result<Self, AppError> {
        match s {
            "read" => Ok(Scope::Read),
            "write" => Ok(Scope::Write),
            "admin" => Ok(Scope::Admin),
            other => Err(AppError::InvalidInput(format!(
                "unknown scope {other:?} (read, write or admin)"
            ))),
        }
    }
}

/// A key as stored (never the key itself).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyRecord {
    /// The 8 hex characters after `nck_`.
    pub prefix: String,
    /// Its tenant.
    pub tenant: String,
    /// What it may do.
    pub scope: Scope,
    /// A label for people (`ci`, `laptop`).
    pub name: String,
    /// SHA-256 of the whole key, hex.
    sha256: String,
    /// When it was made, milliseconds since 1970.
    pub created_ms: u64,
    /// When it was revoked, if it was.
    pub revoked_ms: Option<u64>,
}

/// A tenant as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantRecord {
    /// The id.
    pub id: String,
    /// When it was made, milliseconds since 1970.
    pub created_ms: u64,
}

/// Who a request is: its tenant and what its key may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The tenant.
    pub tenant: Tenant,
    /// The key's scope.
    pub scope: Scope,
    /// The key's prefix (`None` on a server without keys).
    pub key: Option<String>,
}

/// The tenants and keys: of a data dir, or of the PostgreSQL schema every replica
/// shares.
pub struct KeyStore {
    backend: Backend,
}

enum Backend {
    /// `<data dir>/auth.redb`.
    Redb(redb::Database),
    /// `auth_tenants` and `auth_keys` in the document store's schema (its migration 4).
    Pg(Box<neuralcore_store::PgStore>),
}

fn internal(e: impl std::fmt::Display) -> AppError {
    AppError::Internal(format!("auth store: {e}"))
}

fn pg_error(e: neuralcore_pg::PgError) -> AppError {
    match e {
        neuralcore_pg::PgError::Unavailable(m) => AppError::Unavailable(format!("auth store: {m}")),
        other => internal(other),
    }
}

fn unavailable(e: &AppError) -> bool {
    matches!(e, AppError::Unavailable(_))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Equal without stopping at the first difference (the time taken says nothing about
/// where a guessed hash differs).
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

const KEY_COLUMNS: &str = "prefix, tenant, scope, name, sha256, created_ms, revoked_ms";

fn key_from_row(r: &neuralcore_pg::postgres::Row) -> Result<KeyRecord, AppError> {
    let ms = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(KeyRecord {
        prefix: r.get(0),
        tenant: r.get(1),
        scope: r.get::<_, String>(2).parse()?,
        name: r.get(3),
        sha256: r.get(4),
        created_ms: ms(r.get(5)),
        revoked_ms: r.get::<_, Option<i64>>(6).map(ms),
    })
}

fn ms_i64(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// Open (or create) the small database `<data dir>/<file>` of the store `what` (the
/// auth store, the mark store), after checking the data dir's format.
pub(crate) fn open_small_redb(
    data_dir: &Path,
    file: &str,
    what: &str,
) -> Result<redb::Database, AppError> {
    neuralcore_engine::check_data_dir_format(data_dir)?;
    let path = data_dir.join(file);
    // The file and the cause, so a user can act on it (a read-only or full disk).
    let at =
        |e: &dyn std::fmt::Display| AppError::Internal(format!("{what}: {}: {e}", path.display()));
    std::fs::create_dir_all(data_dir).map_err(|e| at(&e))?;
    // A small page cache: redb's default is 1 GiB per database.
    redb::Builder::new()
        .set_cache_size(4 << 20)
        .create(&path)
        .map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => AppError::Unavailable(format!(
                "the {what} is open in another process (a running server?)"
            )),
            other => at(&other),
        })
}

impl KeyStore {
    /// Open (or create) `<data dir>/auth.redb`.
    pub fn open(data_dir: &Path) -> Result<KeyStore, AppError> {
        let db = open_small_redb(data_dir, "auth.redb", "auth store")?;
        let txn = db.begin_write().map_err(internal)?;
        txn.open_table(TENANTS).map_err(internal)?;
        txn.open_table(KEYS).map_err(internal)?;
        txn.commit().map_err(internal)?;
        Ok(KeyStore {
            backend: Backend::Redb(db),
        })
    }

    /// The key store `config` asks for: with `[store] backend = "postgres"` the tenants
    /// and keys live in the store's schema (created or migrated on connect), shared by
    /// every replica; else `<data dir>/auth.redb`.
    pub fn open_with(
        data_dir: &Path,
        config: &neuralcore_engine::Config,
    ) -> Result<KeyStore, AppError> {
        if config.store.backend != neuralcore_engine::StoreBackendKind::Postgres {
            return KeyStore::open(data_dir);
        }
        let store = neuralcore_engine::Engine::postgres_store(config)?;
        Ok(KeyStore {
            backend: Backend::Pg(Box::new(store)),
        })
    }

    /// Whether the tenants and keys live in PostgreSQL (backed up with `pg_dump`).
    pub fn in_postgres(&self) -> bool {
        matches!(self.backend, Backend::Pg(_))
    }

    /// Run `f` on a pooled connection with the quoted schema; reads are retried once on
    /// a stale connection.
    fn pg<T>(
        store: &neuralcore_store::PgStore,
        f: impl Fn(
            &mut neuralcore_pg::postgres::Client,
            &str,
        ) -> Result<T, neuralcore_pg::postgres::Error>,
    ) -> Result<T, AppError> {
        let (pool, s) = store.pool();
        pool.read(pg_error, unavailable, |c| {
            f(&mut c.client, s).map_err(|e| pg_error(neuralcore_pg::map(e, &pool.url)))
        })
    }

    /// Copy the tenants and keys (hashes only) into a new file at `dest`, as committed
    /// now; how many records. Keys in PostgreSQL are backed up with `pg_dump`.
    pub fn backup_to(&self, dest: &Path) -> Result<u64, AppError> {
        let Backend::Redb(db) = &self.backend else {
            return Err(AppError::InvalidInput(
                "the tenants and keys live in PostgreSQL: back them up with pg_dump --schema"
                    .into(),
            ));
        };
        let mut copy = neuralcore_store::copy::RedbCopy::begin(db, dest).map_err(internal)?;
        copy.table(TENANTS)
            .and_then(|c| c.table(KEYS))
            .map_err(internal)?;
        copy.finish().map_err(internal)
    }

    /// Make a tenant (the `default` one always exists).
    pub fn create_tenant(&self, id: &str) -> Result<TenantRecord, AppError> {
        let tenant = Tenant::new(id)?;
        if tenant.is_default() {
            return Err(AppError::InvalidInput(
                "the default tenant always exists".into(),
            ));
        }
        let rec = TenantRecord {
            id: id.to_string(),
            created_ms: now_ms(),
        };
        let inserted = match &self.backend {
            Backend::Redb(db) => {
                let txn = db.begin_write().map_err(internal)?;
                {
                    let mut t = txn.open_table(TENANTS).map_err(internal)?;
                    if t.get(id).map_err(internal)?.is_some() {
                        return Err(AppError::InvalidInput(format!("tenant {id:?} exists")));
                    }
                    let bytes = serde_json::to_vec(&rec).map_err(internal)?;
                    t.insert(id, bytes.as_slice()).map_err(internal)?;
                }
                txn.commit().map_err(internal)?;
                true
            }
            Backend::Pg(store) => {
                Self::pg(store, |c, s| {
                    c.execute(
                        &format!(
                            "INSERT INTO {s}.auth_tenants (id, created_ms) VALUES ($1, $2) \
                             ON CONFLICT DO NOTHING"
                        ),
                        &[&rec.id, &ms_i64(rec.created_ms)],
                    )
                })? == 1
            }
        };
        if !inserted {
            return Err(AppError::InvalidInput(format!("tenant {id:?} exists")));
        }
        Ok(rec)
    }

    /// Every tenant, the default one first.
    pub fn tenants(&self) -> Result<Vec<TenantRecord>, AppError> {
        let mut out = vec![TenantRecord {
            id: crate::DEFAULT_TENANT.into(),
            created_ms: 0,
        }];
        match &self.backend {
            Backend::Redb(db) => {
                let txn = db.begin_read().map_err(internal)?;
                let t = txn.open_table(TENANTS).map_err(internal)?;
                for e in t.iter().map_err(internal)? {
                    let (_, v) = e.map_err(internal)?;
                    out.push(serde_json::from_slice(v.value()).map_err(internal)?);
                }
            }
            Backend::Pg(store) => {
                let rows = Self::pg(store, |c, s| {
                    c.query(
                        &format!("SELECT id, created_ms FROM {s}.auth_tenants ORDER BY id"),
                        &[],
                    )
                })?;
                out.extend(rows.iter().map(|r| TenantRecord {
                    id: r.get(0),
                    created_ms: u64::try_from(r.get::<_, i64>(1)).unwrap_or(0),
                }));
            }
        }
        Ok(out)
    }

    fn tenant_exists(&self, id: &str) -> Result<bool, AppError> {
        if id == crate::DEFAULT_TENANT {
            return Ok(true);
        }
        match &self.backend {
            Backend::Redb(db) => {
                let txn = db.begin_read().map_err(internal)?;
                let t = txn.open_table(TENANTS).map_err(internal)?;
                Ok(t.get(id).map_err(internal)?.is_some())
            }
            Backend::Pg(store) => Self::pg(store, |c, s| {
                c.query_opt(
                    &format!("SELECT 1 FROM {s}.auth_tenants WHERE id = $1"),
                    &[&id],
                )
                .map(|r| r.is_some())
            }),
        }
    }

    /// Make a key for `tenant` (which must exist) with `scope`; returns the key itself,
    /// the only time it is seen, and its record.
    pub fn create_key(
        &self,
        tenant: &str,
        scope: Scope,
        name: &str,
    ) -> Result<(String, KeyRecord), AppError> {
        if !self.tenant_exists(tenant)? {
            return Err(AppError::NotFound(format!(
                "no tenant {tenant:?} (neuralcore tenants create {tenant})"
            )));
        }
        let mut bytes = [0u8; 28];
        getrandom::getrandom(&mut bytes)
            .map_err(|e| AppError::Internal(format!("no randomness from the OS: {e}")))?;
        let prefix = hex(&bytes[..4]);
        let key = format!("nck_{prefix}_{}", hex(&bytes[4..]));
        let rec = KeyRecord {
            prefix: prefix.clone(),
            tenant: tenant.to_string(),
            scope,
            name: name.to_string(),
            sha256: hex(&Sha256::digest(key.as_bytes())),
            created_ms: now_ms(),
            revoked_ms: None,
        };
        // 2^-32 per existing key: try again rather than overwrite.
        let collision = || AppError::Unavailable("key prefix collision; try again".into());
        match &self.backend {
            Backend::Redb(db) => {
                let txn = db.begin_write().map_err(internal)?;
                {
                    let mut t = txn.open_table(KEYS).map_err(internal)?;
                    if t.get(prefix.as_str()).map_err(internal)?.is_some() {
                        return Err(collision());
                    }
                    let v = serde_json::to_vec(&rec).map_err(internal)?;
                    t.insert(prefix.as_str(), v.as_slice()).map_err(internal)?;
                }
                txn.commit().map_err(internal)?;
            }
            Backend::Pg(store) => {
                let (pool, s) = store.pool();
                let n = pool.write(pg_error, unavailable, |c| {
                    c.client
                        .execute(
                            &format!(
                                "INSERT INTO {s}.auth_keys ({KEY_COLUMNS}) \
                                 VALUES ($1, $2, $3, $4, $5, $6, NULL) ON CONFLICT DO NOTHING"
                            ),
                            &[
                                &rec.prefix,
                                &rec.tenant,
                                &rec.scope.name(),
                                &rec.name,
                                &rec.sha256,
                                &ms_i64(rec.created_ms),
                            ],
                        )
                        .map_err(|e| pg_error(neuralcore_pg::map(e, &pool.url)))
                })?;
                if n != 1 {
                    return Err(collision());
                }
            }
        }
        Ok((key, rec))
    }

    /// Every key (revoked ones too), oldest first.
    pub fn keys(&self) -> Result<Vec<KeyRecord>, AppError> {
        let mut out = Vec::new();
        match &self.backend {
            Backend::Redb(db) => {
                let txn = db.begin_read().map_err(internal)?;
                let t = txn.open_table(KEYS).map_err(internal)?;
                for e in t.iter().map_err(internal)? {
                    let (_, v) = e.map_err(internal)?;
                    out.push(serde_json::from_slice::<KeyRecord>(v.value()).map_err(internal)?);
                }
            }
            Backend::Pg(store) => {
                let rows = Self::pg(store, |c, s| {
                    c.query(&format!("SELECT {KEY_COLUMNS} FROM {s}.auth_keys"), &[])
                })?;
                for r in &rows {
                    out.push(key_from_row(r)?);
                }
            }
        }
        out.sort_by_key(|k| k.created_ms);
        Ok(out)
    }

    /// The key with this prefix, revoked or not.
    fn key(&self, prefix: &str) -> Result<Option<KeyRecord>, AppError> {
        match &self.backend {
            Backend::Redb(db) => {
                let txn = db.begin_read().map_err(internal)?;
                let t = txn.open_table(KEYS).map_err(internal)?;
                let Some(v) = t.get(prefix).map_err(internal)? else {
                    return Ok(None);
                };
                serde_json::from_slice(v.value())
                    .map(Some)
                    .map_err(internal)
            }
            Backend::Pg(store) => Self::pg(store, |c, s| {
                c.query_opt(
                    &format!("SELECT {KEY_COLUMNS} FROM {s}.auth_keys WHERE prefix = $1"),
                    &[&prefix],
                )
            })?
            .as_ref()
            .map(key_from_row)
            .transpose(),
        }
    }

    /// Whether any key can be used (a server without one binds only to loopback).
    pub fn has_active_keys(&self) -> Result<bool, AppError> {
        Ok(self.keys()?.iter().any(|k| k.revoked_ms.is_none()))
    }

    /// Revoke the key with this prefix; its requests are refused from now on (on every
    /// replica, when the keys live in PostgreSQL: each request reads its key there).
    pub fn revoke(&self, prefix: &str) -> Result<KeyRecord, AppError> {
        let not_found = || AppError::NotFound(format!("no key with prefix {prefix:?}"));
        match &self.backend {
            Backend::Redb(db) => {
                let txn = db.begin_write().map_err(internal)?;
                let rec = {
                    let mut t = txn.open_table(KEYS).map_err(internal)?;
                    let mut rec: KeyRecord = match t.get(prefix).map_err(internal)? {
                        Some(v) => serde_json::from_slice(v.value()).map_err(internal)?,
                        None => return Err(not_found()),
                    };
                    if rec.revoked_ms.is_none() {
                        rec.revoked_ms = Some(now_ms());
                    }
                    let v = serde_json::to_vec(&rec).map_err(internal)?;
                    t.insert(prefix, v.as_slice()).map_err(internal)?;
                    rec
                };
                txn.commit().map_err(internal)?;
                Ok(rec)
            }
            Backend::Pg(store) => {
                let (pool, s) = store.pool();
                let row = pool.write(pg_error, unavailable, |c| {
                    c.client
                        .query_opt(
                            &format!(
                                "UPDATE {s}.auth_keys SET revoked_ms = COALESCE(revoked_ms, $2) \
                                 WHERE prefix = $1 RETURNING {KEY_COLUMNS}"
                            ),
                            &[&prefix, &ms_i64(now_ms())],
                        )
                        .map_err(|e| pg_error(neuralcore_pg::map(e, &pool.url)))
                })?;
                row.as_ref()
                    .map(key_from_row)
                    .transpose()?
                    .ok_or_else(not_found)
            }
        }
    }

    /// Who `key` is, or `None` for a malformed, unknown or revoked key (the caller
    /// answers all three alike).
    pub fn authenticate(&self, key: &str) -> Result<Option<Principal>, AppError> {
        let Some(rest) = key.strip_prefix("nck_") else {
            return Ok(None);
        };
        let Some((prefix, secret)) = rest.split_once('_') else {
            return Ok(None);
        };
        let hexish = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        };
        if prefix.len() != 8 || secret.len() != 48 || !hexish(prefix) || !hexish(secret) {
            return Ok(None);
        }
        let Some(rec) = self.key(prefix)? else {
            return Ok(None);
        };
        if rec.revoked_ms.is_some() || !same(&rec.sha256, &hex(&Sha256::digest(key.as_bytes()))) {
            return Ok(None);
        }
        Ok(Some(Principal {
            tenant: Tenant::new(&rec.tenant)?,
            scope: rec.scope,
            key: Some(rec.prefix),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_dir_of_a_newer_format_is_refused_before_the_key_file_is_made() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(neuralcore_engine::FORMAT_FILE),
            r#"{"format": 99, "written_by": "9.9.0"}"#,
        )
        .unwrap();
        let err = KeyStore::open(dir.path()).err().unwrap();
        assert!(matches!(err, AppError::InvalidInput(_)), "{err}");
        assert!(
            err.to_string().contains("run neuralcore 9.9.0 or newer"),
            "{err}"
        );
        assert!(!dir.path().join("auth.redb").exists());
    }

    #[test]
    fn keys_are_shown_once_hashed_and_revocable() {
        let dir = tempfile::tempdir().unwrap();
        let ks = KeyStore::open(dir.path()).unwrap();
        assert!(!ks.has_active_keys().unwrap());
        assert!(matches!(
            ks.create_key("acme", Scope::Read, "x"),
            Err(AppError::NotFound(_))
        ));
        ks.create_tenant("acme").unwrap();
        assert!(ks.create_tenant("acme").is_err());
        assert!(ks.create_tenant("default").is_err());
        assert!(ks.create_tenant("Bad").is_err());
        let (key, rec) = ks.create_key("acme", Scope::Write, "ci").unwrap();
        assert!(key.starts_with(&format!("nck_{}_", rec.prefix)));
        assert_eq!(key.len(), 4 + 8 + 1 + 48);
        // The key itself is nowhere in the file.
        drop(ks);
        let raw = std::fs::read(dir.path().join("auth.redb")).unwrap();
        let secret = key.rsplit('_').next().unwrap().as_bytes();
        assert!(!raw.windows(secret.len()).any(|w| w == secret));
        let ks = KeyStore::open(dir.path()).unwrap();
        let p = ks.authenticate(&key).unwrap().unwrap();
        assert_eq!((p.tenant.as_str(), p.scope), ("acme", Scope::Write));
        // Malformed, unknown and wrong keys are all just "no".
        let mut wrong = key.clone();
        wrong.pop();
        wrong.push(if key.ends_with('0') { '1' } else { '0' });
        for bad in [
            "",
            "nck_",
            "Bearer x",
            &wrong,
            &key.to_uppercase(),
            &format!("{key}0"),
            "nck_00000000_000000000000000000000000000000000000000000000000",
        ] {
            assert_eq!(ks.authenticate(bad).unwrap(), None, "{bad:?}");
        }
        assert!(ks.has_active_keys().unwrap());
        ks.revoke(&rec.prefix).unwrap();
        assert_eq!(ks.authenticate(&key).unwrap(), None);
        assert!(!ks.has_active_keys().unwrap());
        assert!(matches!(ks.revoke("nope"), Err(AppError::NotFound(_))));
        let tenants: Vec<String> = ks.tenants().unwrap().into_iter().map(|t| t.id).collect();
        assert_eq!(tenants, ["default", "acme"]);
        assert_eq!(ks.keys().unwrap().len(), 1);
        assert_eq!("admin".parse::<Scope>().unwrap(), Scope::Admin);
        assert!("root".parse::<Scope>().is_err());
        assert!(Scope::Read < Scope::Write && Scope::Write < Scope::Admin);
    }
}
