//! The connection settings libpq reads that the driver does not: the TLS options
//! (`sslmode`'s `verify-ca`/`verify-full`, `sslrootcert`, `sslcert`, `sslkey`) and the
//! password file (`passfile`), taken out of the URL (either form) before the driver
//! parses the rest; and, when the URL leaves them out, libpq's environment variables
//! `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`, `PGPASSWORD` and
//! `PGPASSFILE`, then `~/.pgpass`.

use std::path::{Path, PathBuf};

use crate::tls::{SslMode, TlsFiles};

/// The settings taken out of a URL.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Extra {
    pub sslmode: Option<String>,
    pub sslrootcert: Option<String>,
    pub sslcert: Option<String>,
    pub sslkey: Option<String>,
    pub passfile: Option<String>,
}

impl Extra {
    /// Take `key`'s `value` if it is one of ours; false when it is the driver's.
    fn take(&mut self, key: &str, value: String) -> bool {
        let slot = match key {
            "sslmode" => &mut self.sslmode,
            "sslrootcert" => &mut self.sslrootcert,
            "sslcert" => &mut self.sslcert,
            "sslkey" => &mut self.sslkey,
            "passfile" => &mut self.passfile,
            _ => return false,
        };
        // An empty value is unset, as in libpq.
        *slot = Some(value).filter(|v| !v.is_empty());
        true
    }

    /// Fill what the URL left out from the environment; resolve into TLS files.
    pub fn tls(
        &mut self,
        env: &dyn Fn(&str) -> Option<String>,
        home: Option<PathBuf>,
    ) -> Result<TlsFiles, String> {
        for (slot, var) in [
            (&mut self.sslmode, "PGSSLMODE"),
            (&mut self.sslrootcert, "PGSSLROOTCERT"),
            (&mut self.sslcert, "PGSSLCERT"),
            (&mut self.sslkey, "PGSSLKEY"),
            (&mut self.passfile, "PGPASSFILE"),
        ] {
            if slot.is_none() {
                *slot = env(var).filter(|v| !v.is_empty());
            }
        }
        let system = self.sslrootcert.as_deref() == Some("system");
        let mode = match &self.sslmode {
            Some(m) => SslMode::parse(m)?,
            // libpq 16: the public roots make verify-full the default.
            None if system => SslMode::VerifyFull,
            None => SslMode::Prefer,
        };
        if system && mode != SslMode::VerifyFull {
            return Err(format!(
                "sslrootcert=system needs sslmode=verify-full, not {}: a public CA signs \
                 certificates for anyone's host names, so only the name check makes it safe",
                mode.as_str()
            ));
        }
        Ok(TlsFiles {
            mode,
            root: self.sslrootcert.clone(),
            cert: self.sslcert.clone(),
            key: self.sslkey.clone(),
            home,
        })
    }
}

/// `url` without our settings, and those settings. Accepts the URL form
/// (`postgres://...?sslmode=verify-full&sslrootcert=/ca.pem`) and the key-value form
/// (`host=h sslmode=verify-full sslrootcert='/ca.pem'`).
pub(crate) fn split(url: &str) -> Result<(String, Extra), String> {
    let mut extra = Extra::default();
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    if is_url {
        let Some((base, query)) = url.split_once('?') else {
            return Ok((url.to_string(), extra));
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let key = percent_decode(k)?;
            if !extra.take(&key, percent_decode(v)?) {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return Ok((rest, extra));
    }
    let mut kept = Vec::new();
    for (k, v) in key_values(url)? {
        if !extra.take(&k, v.clone()) {
            kept.push(format!(
                "{k}='{}'",
                v.replace('\\', "\\\\").replace('\'', "\\'")
            ));
        }
    }
    Ok((kept.join(" "), extra))
}

/// `%XX` escapes decoded (as UTF-8).
fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "invalid %-escape in the PostgreSQL URL".to_string())?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the PostgreSQL URL decodes to invalid UTF-8".into())
}

/// The pairs of a key-value connection string (`key = value`, values optionally in
/// single quotes with `\'` and `\\` escapes).
fn key_values(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut it = s.chars().peekable();
    let skip_ws = |it: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        while it.next_if(|c| c.is_whitespace()).is_some() {}
    };
    loop {
        skip_ws(&mut it);
        if it.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(c) = it.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        skip_ws(&mut it);
        if it.next() != Some('=') {
            // Not naming the word: it may be half of an unquoted password.
            return Err(
                "invalid connection string: a word without `=value` (expected \
                        key=value pairs, values with spaces in single quotes, or \
                        postgres://user@host:port/db)"
                    .into(),
            );
        }
        skip_ws(&mut it);
        let mut value = String::new();
        if it.next_if_eq(&'\'').is_some() {
            loop {
                match it.next() {
                    Some('\\') => value.push(it.next().ok_or("unterminated quoted value")?),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                    None => return Err("unterminated quoted value in the connection string".into()),
                }
            }
        } else {
            while let Some(c) = it.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.push(it.next().ok_or("a trailing backslash")?);
                } else {
                    value.push(c);
                }
            }
        }
        out.push((key, value));
    }
}

/// The password for (host, port, db, user) in a libpq password file
/// (`hostname:port:database:username:password` lines, `*` matching anything, `\:` and
/// `\\` escapes; `localhost` also matches a Unix socket). `None` when no line matches,
/// the file is missing, or (as libpq) it can be read by group or others (logged).
pub(crate) fn passfile_lookup(
    path: &Path,
    host: &str,
    port: u16,
    db: &str,
    user: &str,
) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                "password file has group or world access; permissions should be u=rw \
                 (0600) or less: ignored"
            );
            return None;
        }
    }
    let port = port.to_string();
    let want = [host, port.as_str(), db, user];
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .find_map(|line| {
            let fields = passfile_fields(line);
            if fields.len() < 5 {
                return None;
            }
            let matches = fields[..4]
                .iter()
                .zip(want)
                .all(|(f, w)| f == "*" || f == w || (w.starts_with('/') && f == "localhost"));
            // libpq ends the password at the next unescaped `:` too.
            matches.then(|| fields[4].clone())
        })
}

fn passfile_fields(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut it = line.chars();
    while let Some(c) = it.next() {
        match c {
            '\\' => {
                if let Some(n) = it.next() {
                    out.last_mut().expect("nonempty").push(n);
                }
            }
            ':' => out.push(String::new()),
            c => out.last_mut().expect("nonempty").push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_settings_leave_the_url() {
        let (rest, x) = split(
            "postgres://u@h:5/db?sslmode=verify-full&application_name=a&sslrootcert=%2Ftmp%2Fca.pem&passfile=/p",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u@h:5/db?application_name=a");
        assert_eq!(x.sslmode.as_deref(), Some("verify-full"));
        assert_eq!(x.sslrootcert.as_deref(), Some("/tmp/ca.pem"));
        assert_eq!(x.passfile.as_deref(), Some("/p"));
        let (rest, x) = split("postgres://u@h/db?sslmode=require").unwrap();
        assert_eq!(rest, "postgres://u@h/db");
        assert_eq!(x.sslmode.as_deref(), Some("require"));
        assert_eq!(split("postgres://u@h/db").unwrap().0, "postgres://u@h/db");

        let (rest, x) =
            split("host=h user=u sslmode = verify-ca sslrootcert='/a b/c\\'a.pem' password='p w'")
                .unwrap();
        assert_eq!(rest, "host='h' user='u' password='p w'");
        assert_eq!(x.sslmode.as_deref(), Some("verify-ca"));
        assert_eq!(x.sslrootcert.as_deref(), Some("/a b/c'a.pem"));
        let parsed: postgres::Config = rest.parse().unwrap();
        assert_eq!(parsed.get_password(), Some(&b"p w"[..]));
    }

    #[test]
    fn bad_urls_are_clear() {
        assert!(split("postgres://u@h/db?sslrootcert=%zz").is_err());
        let e = split("host=h password=my secret").unwrap_err();
        assert!(
            e.contains("without `=value`") && !e.contains("secret"),
            "{e}"
        );
        assert!(split("host='h").unwrap_err().contains("unterminated"));
        let mut x = Extra {
            sslmode: Some("verify".into()),
            ..Extra::default()
        };
        let e = x.tls(&|_| None, None).unwrap_err();
        assert!(e.contains("verify-full"), "{e}");
        let mut x = Extra {
            sslmode: Some("allow".into()),
            ..Extra::default()
        };
        assert!(x
            .tls(&|_| None, None)
            .unwrap_err()
            .contains("not supported"));
    }

    #[test]
    fn the_environment_fills_what_the_url_leaves_out() {
        let env = |k: &str| match k {
            "PGSSLMODE" => Some("verify-full".to_string()),
            "PGSSLROOTCERT" => Some("/env/ca.pem".to_string()),
            _ => None,
        };
        let mut x = Extra {
            sslrootcert: Some("/url/ca.pem".into()),
            ..Extra::default()
        };
        let files = x.tls(&env, None).unwrap();
        assert_eq!(files.mode, SslMode::VerifyFull);
        assert_eq!(files.root.as_deref(), Some("/url/ca.pem"));
        let files = Extra::default().tls(&|_| None, None).unwrap();
        assert_eq!(files.mode, SslMode::Prefer);
        // Public roots: verify-full by default, nothing weaker.
        let system = |mode: Option<&str>| {
            Extra {
                sslmode: mode.map(str::to_string),
                sslrootcert: Some("system".into()),
                ..Extra::default()
            }
            .tls(&|_| None, None)
        };
        assert_eq!(system(None).unwrap().mode, SslMode::VerifyFull);
        for weaker in ["require", "verify-ca", "prefer"] {
            assert!(system(Some(weaker)).unwrap_err().contains("verify-full"));
        }
        // Empty is unset.
        let (_, x) = split("postgres://u@h/db?sslmode=&sslrootcert=").unwrap();
        assert_eq!(x, Extra::default());
    }

    #[test]
    fn password_files_as_libpq_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pgpass");
        std::fs::write(
            &path,
            "# comment\n\
             other:5432:*:u:nope\n\
             127.0.0.1:5440:db:u:s3cr\\:et\n\
             *:*:*:admin:any\n\
             localhost:5432:*:v:sock\n",
        )
        .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        assert_eq!(
            passfile_lookup(&path, "127.0.0.1", 5440, "db", "u").as_deref(),
            Some("s3cr:et")
        );
        assert_eq!(passfile_lookup(&path, "127.0.0.1", 5441, "db", "u"), None);
        assert_eq!(
            passfile_lookup(&path, "h", 1, "x", "admin").as_deref(),
            Some("any")
        );
        assert_eq!(
            passfile_lookup(&path, "/run/pg", 5432, "x", "v").as_deref(),
            Some("sock")
        );
        assert_eq!(
            passfile_lookup(&dir.path().join("missing"), "h", 1, "d", "u"),
            None
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert_eq!(passfile_lookup(&path, "h", 1, "x", "admin"), None);
        }
    }
}
