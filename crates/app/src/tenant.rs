//! Tenants: every collection, document, run and memory belongs to one. The CLI works as
//! the `default` tenant, whose collections keep their plain names in the store (so data
//! dirs made before tenants existed read unchanged); another tenant's collection `docs`
//! is stored as `acme~docs`. `~` is not allowed in a collection name, so no name one
//! tenant can choose is another tenant's stored name.

use std::fmt;

use crate::AppError;

/// The tenant of the CLI and of a server without API keys.
pub const DEFAULT_TENANT: &str = "default";

use neuralcore_core::TENANT_SEP as SEP;

/// A tenant id: 1–32 characters of `[a-z0-9_]`, starting with a letter or digit.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct Tenant(String);

impl Tenant {
    /// Check `id` against the naming rule.
    pub fn new(id: &str) -> Result<Tenant, AppError> {
        neuralcore_core::validate_tenant(id).map_err(AppError::InvalidInput)?;
        Ok(Tenant(id.to_string()))
    }

    /// The `default` tenant.
    pub fn default_tenant() -> Tenant {
        Tenant(DEFAULT_TENANT.into())
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the `default` tenant.
    pub fn is_default(&self) -> bool {
        self.0 == DEFAULT_TENANT
    }

    /// The store's name of this tenant's collection `name` (checked against the
    /// collection naming rule).
    pub fn stored(&self, name: &str) -> Result<String, AppError> {
        neuralcore_core::validate_collection(name).map_err(AppError::InvalidInput)?;
        Ok(if self.is_default() {
            name.to_string()
        } else {
            format!("{}{SEP}{name}", self.0)
        })
    }

    /// The tenant's own name of a stored collection, when the tenant owns it.
    pub fn owns<'a>(&self, stored: &'a str) -> Option<&'a str> {
        match stored.split_once(SEP) {
            Some((t, name)) if t == self.0 && !self.is_default() => Some(name),
            None if self.is_default() => Some(stored),
            _ => None,
        }
    }

    /// The Mind's id of this tenant's run or session `id`: `<tenant>-<id>`, the
    /// default tenant's too. Tenant ids hold no `-`, so two tenants' ids never meet.
    pub fn run_id(&self, id: &str) -> String {
        format!("{}-{id}", self.0)
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_never_collide() {
        let d = Tenant::default_tenant();
        let a = Tenant::new("acme").unwrap();
        assert_eq!(d.stored("docs").unwrap(), "docs");
        assert_eq!(a.stored("docs").unwrap(), "acme~docs");
        assert_eq!(a.owns("acme~docs"), Some("docs"));
        assert_eq!(a.owns("docs"), None);
        assert_eq!(d.owns("acme~docs"), None);
        assert_eq!(d.owns("docs"), Some("docs"));
        assert_eq!(Tenant::new("acm").unwrap().owns("acme~docs"), None);
        // No name a tenant can choose is another tenant's stored name.
        assert!(d.stored("acme~docs").is_err());
        assert!(a.stored("x~y").is_err());
        for bad in ["", "Acme", "-x", "a-b", "a b", "a~b", &"x".repeat(33), "ü"] {
            assert!(Tenant::new(bad).is_err(), "{bad:?}");
        }
        use neuralcore_core::validate_stored_collection as stored;
        assert!(stored("acme~docs").is_ok());
        assert!(stored("docs").is_ok());
        assert!(stored("Acme~docs").is_err());
        assert!(stored("acme~").is_err());
        assert!(stored("acme~x~y").is_err());
        assert_ne!(a.run_id("r1"), d.run_id("r1"));
        // Ids split at the first '-': tenant "a" with "b-c" is not tenant "a_b" with "c".
        assert_ne!(
            Tenant::new("a").unwrap().run_id("b-c"),
            Tenant::new("a_b").unwrap().run_id("c")
        );
        assert_eq!(d.run_id("s1"), "default-s1");
    }
}
