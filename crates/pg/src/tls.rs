//! TLS for the driver, on rustls (with ring), in the modes libpq names:
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default) | when the server offers it | not checked |
//! | `require` | always | not checked, unless a CA file is given or `~/.postgresql/root.crt` exists: then as `verify-ca` |
//! | `verify-ca` | always | signed by a CA in `sslrootcert` |
//! | `verify-full` | always | signed by a CA in `sslrootcert`, and names the host |
//!
//! `sslrootcert` is a PEM file of CA certificates, or `system` for Mozilla's roots (the
//! `webpki-roots` set), which (as in libpq 16) makes `verify-full` the default and any
//! weaker mode an error: a public CA signs certificates for anyone's names. `verify-*`
//! without `sslrootcert` read `~/.postgresql/root.crt`, as libpq does, and fail clearly
//! when that is missing. `sslcert` and `sslkey` (PEM) present a client certificate. The
//! name checked by `verify-full` is the URL's host (with `hostaddr` naming the address to
//! dial, when the certificate names a host the resolver does not know); the certificate
//! must name it in its subject alternative names (no fallback to the common name), and a
//! CA certificate is not accepted as the server's own (the web PKI's rules). Unix sockets
//! never use TLS, as in libpq. Channel binding (SCRAM-SHA-256-PLUS) is not offered.

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};
use postgres::Socket;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How TLS is used, as libpq's `sslmode` (`allow` is not supported).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// Never.
    Disable,
    /// When the server offers it, the certificate unchecked.
    #[default]
    Prefer,
    /// Always, the certificate unchecked.
    Require,
    /// Always, the certificate signed by a trusted CA.
    VerifyCa,
    /// Always, the certificate signed by a trusted CA and naming the host.
    VerifyFull,
}

impl SslMode {
    /// Parse libpq's spelling.
    pub fn parse(s: &str) -> Result<SslMode, String> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => return Err("sslmode=allow is not supported: use prefer or disable".into()),
            other => {
                return Err(format!(
                    "unknown sslmode {other:?} (expected disable, prefer, require, verify-ca \
                     or verify-full)"
                ))
            }
        })
    }

    /// libpq's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// The driver's mode: it knows only whether TLS is off, optional or required.
    pub(crate) fn driver(self) -> postgres::config::SslMode {
        match self {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            _ => postgres::config::SslMode::Require,
        }
    }
}

/// Where the TLS settings came from, resolved into files.
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsFiles {
    pub mode: SslMode,
    /// `sslrootcert` as given (a path, or `system`), if given.
    pub root: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
    /// The home folder, for `~/.postgresql/root.crt`.
    pub home: Option<PathBuf>,
}

/// The TLS side of a connection: a rustls client configuration, or none when TLS is
/// off. Cheap to clone.
#[derive(Clone)]
pub struct Tls {
    config: Option<Arc<ClientConfig>>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("on", &self.config.is_some())
            .finish()
    }
}

impl Tls {
    /// No TLS.
    pub fn off() -> Tls {
        Tls { config: None }
    }

    /// The client configuration `files` ask for; the error says which file or setting
    /// is wrong.
    pub(crate) fn new(files: &TlsFiles) -> Result<Tls, String> {
        if files.mode == SslMode::Disable {
            return Ok(Tls::off());
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        // libpq: "if a root CA file exists, require behaves like verify-ca".
        let has_root = files.root.is_some()
            || files
                .home
                .as_deref()
                .is_some_and(|h| default_root(h).exists());
        let mode = match files.mode {
            SslMode::Require if has_root => SslMode::VerifyCa,
            m => m,
        };
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let builder = match mode {
            SslMode::Disable | SslMode::Prefer | SslMode::Require => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAny(provider))),
            SslMode::VerifyCa | SslMode::VerifyFull => {
                let roots = Arc::new(roots(files)?);
                if mode == SslMode::VerifyFull {
                    let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
                        .build()
                        .map_err(|e| format!("sslrootcert: {e}"))?;
                    builder.with_webpki_verifier(webpki)
                } else {
                    builder
                        .dangerous()
                        .with_custom_certificate_verifier(Arc::new(ChainOnly { roots, provider }))
                }
            }
        };
        let config = match (&files.cert, &files.key) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let certs = CertificateDer::pem_file_iter(cert)
                    .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| format!("sslcert {cert}: {e}"))?;
                if certs.is_empty() {
                    return Err(format!("sslcert {cert}: no certificate in the file"));
                }
                let key_der =
                    PrivateKeyDer::from_pem_file(key).map_err(|e| format!("sslkey {key}: {e}"))?;
                builder
                    .with_client_auth_cert(certs, key_der)
                    .map_err(|e| format!("sslcert/sslkey: {e}"))?
            }
            _ => return Err("sslcert and sslkey go together: give both or neither".into()),
        };
        Ok(Tls {
            config: Some(Arc::new(config)),
        })
    }
}

/// The trusted CAs for `verify-*`.
fn roots(files: &TlsFiles) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    let path: PathBuf = match files.root.as_deref() {
        Some("system") => {
            store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            return Ok(store);
        }
        Some(p) => PathBuf::from(p),
        None => match files.home.as_deref().map(default_root) {
            Some(p) if p.exists() => p,
            _ => {
                return Err(format!(
                    "sslmode={} needs the CA that signed the server's certificate: add \
                     sslrootcert=/path/to/ca.pem to the URL (or sslrootcert=system for the \
                     public roots); ~/.postgresql/root.crt does not exist",
                    files.mode.as_str()
                ))
            }
        },
    };
    let shown = path.display();
    let certs = CertificateDer::pem_file_iter(&path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("sslrootcert {shown}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("sslrootcert {shown}: no certificate in the file"));
    }
    for c in certs {
        store
            .add(c)
            .map_err(|e| format!("sslrootcert {shown}: {e}"))?;
    }
    Ok(store)
}

fn default_root(home: &Path) -> PathBuf {
    home.join(".postgresql").join("root.crt")
}

/// `prefer` and `require`: encrypted, the certificate taken as offered (as libpq does);
/// the handshake's signatures are still checked.
#[derive(Debug)]
struct AcceptAny(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the certificate chains to a trusted CA (rustls' public chain check, the
/// one the full verifier runs); the name is not looked at.
#[derive(Debug)]
struct ChainOnly {
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A TLS failure that is not the network's: a certificate refused, a protocol error.
/// Not an `io::Error`, so it is not taken for a server that is down.
#[derive(Debug)]
pub struct TlsError(String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for TlsError {}

/// Whether `e` (or a cause of it) is a TLS refusal (a certificate refused by either
/// side, a TLS alert, a protocol error) rather than the network failing: retrying the
/// same connection will not help. Some refusals surface as I/O errors (a server's alert
/// after the handshake), so the causes are searched, inside `io::Error`s too.
pub fn is_tls_refusal(e: &(dyn Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if e.is::<rustls::Error>() || e.is::<TlsError>() {
            return true;
        }
        if let Some(inner) = e.downcast_ref::<io::Error>().and_then(|io| io.get_ref()) {
            if inner.is::<rustls::Error>() || inner.is::<TlsError>() {
                return true;
            }
        }
        cur = e.source();
    }
    false
}

type BoxError = Box<dyn Error + Send + Sync>;

impl MakeTlsConnect<Socket> for Tls {
    type Stream = TlsStream;
    type TlsConnect = Connector;
    type Error = BoxError;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Connector, BoxError> {
        // Asked for every host before the mode is looked at: with TLS off, a connector
        // that is never used (and no host name to check).
        let Some(config) = self.config.clone() else {
            return Ok(Connector {
                tls: None,
                host: domain.to_string(),
            });
        };
        // Empty for a Unix socket, which never uses TLS (`config_with` turns it off); the
        // driver refuses TLS without a host name before it gets here anyway.
        let name = ServerName::try_from(domain.to_string())
            .map_err(|e| Box::new(TlsError(format!("TLS: host {domain:?}: {e}"))) as BoxError)?;
        Ok(Connector {
            tls: Some((config, name)),
            host: domain.to_string(),
        })
    }
}

/// One connection's handshake.
pub struct Connector {
    tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    host: String,
}

impl TlsConnect<Socket> for Connector {
    type Stream = TlsStream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<TlsStream, BoxError>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let Some((config, name)) = self.tls else {
                return Err(Box::new(TlsError("TLS is off (sslmode=disable)".into())) as BoxError);
            };
            tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await
                .map(|s| TlsStream(Box::new(s)))
                .map_err(|e| classify(e, &self.host))
        })
    }
}

/// A handshake error: the network's stay `io::Error` (retryable); rustls' become a
/// [`TlsError`] with a hint.
fn classify(e: io::Error, host: &str) -> BoxError {
    let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
        return Box::new(e);
    };
    let hint = match tls {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            " (the server's certificate is not signed by a CA in sslrootcert)"
        }
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => {
            " (sslmode=verify-full checks that the certificate names the host; verify-ca does not)"
        }
        rustls::Error::InvalidCertificate(CertificateError::Expired)
        | rustls::Error::InvalidCertificate(CertificateError::ExpiredContext { .. }) => {
            " (the server's certificate has expired)"
        }
        _ => "",
    };
    Box::new(TlsError(format!("TLS handshake with {host}: {tls}{hint}")))
}

/// An established TLS stream.
pub struct TlsStream(Box<tokio_rustls::client::TlsStream<Socket>>);

impl AsyncRead for TlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

impl postgres::tls::TlsStream for TlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}
