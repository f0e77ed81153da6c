//! Tenants and API keys, in `<data dir>/auth.redb`.
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

/// The tenants and keys of a data dir.
pub struct KeyStore {
    db: redb::Database,
}

fn internal(e: impl std::fmt::Display) -> AppError {
    AppError::Internal(format!("auth store: {e}"))
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

impl KeyStore {
    /// Open (or create) `<data dir>/auth.redb`.
    pub fn open(data_dir: &Path) -> Result<KeyStore, AppError> {
        neuralcore_engine::check_data_dir_format(data_dir)?;
        let path = data_dir.join("auth.redb");
        // The file and the cause, so a user can act on it (a read-only or full disk).
        let at = |e: &dyn std::fmt::Display| internal(format!("{}: {e}", path.display()));
        std::fs::create_dir_all(data_dir).map_err(|e| at(&e))?;
        // A small page cache: redb's default is 1 GiB per database.
        let db = redb::Builder::new()
            .set_cache_size(4 << 20)
            .create(&path)
            .map_err(|e| match e {
                redb::DatabaseError::DatabaseAlreadyOpen => AppError::Unavailable(
                    "the auth store is open in another process (a running server?)".into(),
                ),
                other => at(&other),
            })?;
        let txn = db.begin_write().map_err(internal)?;
        txn.open_table(TENANTS).map_err(internal)?;
        txn.open_table(KEYS).map_err(internal)?;
        txn.commit().map_err(internal)?;
        Ok(KeyStore { db })
    }

    /// Copy the tenants and keys (hashes only) into a new file at `dest`, as committed
    /// now; how many records.
    pub fn backup_to(&self, dest: &Path) -> Result<u64, AppError> {
        let mut copy = neuralcore_store::copy::RedbCopy::begin(&self.db, dest).map_err(internal)?;
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
        let txn = self.db.begin_write().map_err(internal)?;
        let rec = TenantRecord {
            id: id.to_string(),
            created_ms: now_ms(),
        };
        {
            let mut t = txn.open_table(TENANTS).map_err(internal)?;
            if t.get(id).map_err(internal)?.is_some() {
                return Err(AppError::InvalidInput(format!("tenant {id:?} exists")));
            }
            let bytes = serde_json::to_vec(&rec).map_err(internal)?;
            t.insert(id, bytes.as_slice()).map_err(internal)?;
        }
        txn.commit().map_err(internal)?;
        Ok(rec)
    }

    /// Every tenant, the default one first.
    pub fn tenants(&self) -> Result<Vec<TenantRecord>, AppError> {
        let txn = self.db.begin_read().map_err(internal)?;
        let t = txn.open_table(TENANTS).map_err(internal)?;
        let mut out = vec![TenantRecord {
            id: crate::DEFAULT_TENANT.into(),
            created_ms: 0,
        }];
        for e in t.iter().map_err(internal)? {
            let (_, v) = e.map_err(internal)?;
            out.push(serde_json::from_slice(v.value()).map_err(internal)?);
        }
        Ok(out)
    }

    fn tenant_exists(&self, id: &str) -> Result<bool, AppError> {
        if id == crate::DEFAULT_TENANT {
            return Ok(true);
        }
        let txn = self.db.begin_read().map_err(internal)?;
        let t = txn.open_table(TENANTS).map_err(internal)?;
        Ok(t.get(id).map_err(internal)?.is_some())
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
        let txn = self.db.begin_write().map_err(internal)?;
        {
            let mut t = txn.open_table(KEYS).map_err(internal)?;
            if t.get(prefix.as_str()).map_err(internal)?.is_some() {
                // 2^-32 per existing key: try again rather than overwrite.
                return Err(AppError::Unavailable(
                    "key prefix collision; try again".into(),
                ));
            }
            let v = serde_json::to_vec(&rec).map_err(internal)?;
            t.insert(prefix.as_str(), v.as_slice()).map_err(internal)?;
        }
        txn.commit().map_err(internal)?;
        Ok((key, rec))
    }

    /// Every key (revoked ones too), oldest first.
    pub fn keys(&self) -> Result<Vec<KeyRecord>, AppError> {
        let txn = self.db.begin_read().map_err(internal)?;
        let t = txn.open_table(KEYS).map_err(internal)?;
        let mut out = Vec::new();
        for e in t.iter().map_err(internal)? {
            let (_, v) = e.map_err(internal)?;
            out.push(serde_json::from_slice::<KeyRecord>(v.value()).map_err(internal)?);
        }
        out.sort_by_key(|k| k.created_ms);
        Ok(out)
    }

    /// Whether any key can be used (a server without one binds only to loopback).
    pub fn has_active_keys(&self) -> Result<bool, AppError> {
        Ok(self.keys()?.iter().any(|k| k.revoked_ms.is_none()))
    }

    /// Revoke the key with this prefix; its requests are refused from now on.
    pub fn revoke(&self, prefix: &str) -> Result<KeyRecord, AppError> {
        let txn = self.db.begin_write().map_err(internal)?;
        let rec = {
            let mut t = txn.open_table(KEYS).map_err(internal)?;
            let mut rec: KeyRecord = match t.get(prefix).map_err(internal)? {
                Some(v) => serde_json::from_slice(v.value()).map_err(internal)?,
                None => return Err(AppError::NotFound(format!("no key with prefix {prefix:?}"))),
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
        let txn = self.db.begin_read().map_err(internal)?;
        let t = txn.open_table(KEYS).map_err(internal)?;
        let Some(v) = t.get(prefix).map_err(internal)? else {
            return Ok(None);
        };
        let rec: KeyRecord = serde_json::from_slice(v.value()).map_err(internal)?;
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
