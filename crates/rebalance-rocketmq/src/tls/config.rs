//! [`TlsConfig`]: whom a client trusts, which name it checks, which certificate it shows.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use super::verify::TrustAnyCertificate;

/// The largest PEM file read (a CA bundle of every public root is a few hundred kilobytes).
const MAX_PEM_FILE_LEN: u64 = 4 << 20;

/// A TLS configuration, ready to use: give it to
/// [`RemotingClient::with_tls`](crate::RemotingClient::with_tls). Cheap to clone.
///
/// ```
/// use rebalance_rocketmq::tls::TlsConfig;
///
/// // Test clusters only: trusts any certificate, as Java's tls.test.mode.enable does.
/// let tls = TlsConfig::builder().insecure_trust_any_certificate().build().unwrap();
/// assert!(tls.trusts_any_certificate());
/// ```
#[derive(Clone)]
pub struct TlsConfig {
    pub(super) client: Arc<rustls::ClientConfig>,
    /// The name checked in every server's certificate, instead of the address's host.
    pub(super) server_name: Option<ServerName<'static>>,
    trust: String,
    insecure: bool,
    client_certificate: bool,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("trust", &self.trust)
            .field("server_name", &self.server_name)
            .field("client_certificate", &self.client_certificate)
            .finish()
    }
}

impl TlsConfig {
    /// Starts a configuration: by default, the platform's root certificates are trusted, the
    /// name checked is the host of the address connected to, and no client certificate is shown.
    pub fn builder() -> TlsConfigBuilder {
        TlsConfigBuilder::default()
    }

    /// Whether this configuration trusts any certificate (the insecure test mode).
    pub fn trusts_any_certificate(&self) -> bool {
        self.insecure
    }

    /// The name checked in every server's certificate, if it overrides the address's host.
    pub fn server_name(&self) -> Option<String> {
        self.server_name.as_ref().map(|n| n.to_str().into_owned())
    }
}

/// Where PEM data comes from.
#[derive(Clone)]
enum Pem {
    Bytes(Vec<u8>),
    File(PathBuf),
}

impl Pem {
    fn describe(&self, what: &str) -> String {
        match self {
            Pem::Bytes(_) => format!("{what} (PEM bytes)"),
            Pem::File(path) => format!("{what} `{}`", path.display()),
        }
    }

    fn read(&self, what: &str) -> Result<Vec<u8>, TlsConfigError> {
        let path = match self {
            Pem::Bytes(bytes) => return Ok(bytes.clone()),
            Pem::File(path) => path,
        };
        read_capped(path).map_err(|reason| TlsConfigError::Read {
            what: self.describe(what),
            reason,
        })
    }
}

/// Reads a file of at most [`MAX_PEM_FILE_LEN`] bytes.
fn read_capped(path: &Path) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM_FILE_LEN + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_PEM_FILE_LEN {
        return Err(format!("larger than {MAX_PEM_FILE_LEN} bytes"));
    }
    Ok(bytes)
}

/// Builds a [`TlsConfig`]; see [the module](crate::tls).
#[derive(Clone, Default)]
pub struct TlsConfigBuilder {
    platform_roots: bool,
    cas: Vec<Pem>,
    server_name: Option<String>,
    client_certificate: Option<(Pem, Pem)>,
    trust_any: bool,
}

impl std::fmt::Debug for TlsConfigBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfigBuilder")
            .field("platform_roots", &self.platform_roots)
            .field("cas", &self.cas.len())
            .field("server_name", &self.server_name)
            .field("client_certificate", &self.client_certificate.is_some())
            .field("trust_any", &self.trust_any)
            .finish()
    }
}

impl TlsConfigBuilder {
    /// Trusts the platform's root certificates (on Linux the system bundle; `SSL_CERT_FILE` and
    /// `SSL_CERT_DIR` are honoured). The default when no CA is given; with a CA, both are
    /// trusted.
    pub fn trust_platform_roots(mut self) -> Self {
        self.platform_roots = true;
        self
    }

    /// Trusts the CA certificates in `pem` (every `CERTIFICATE` section), instead of the
    /// platform's roots unless [`trust_platform_roots`](Self::trust_platform_roots) is asked too.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.cas.push(Pem::Bytes(pem.into()));
        self
    }

    /// Trusts the CA certificates in the PEM file at `path` (read by [`build`](Self::build)),
    /// like [`ca_pem`](Self::ca_pem). Java's `tls.client.trustCertPath`.
    pub fn ca_pem_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.cas.push(Pem::File(path.into()));
        self
    }

    /// Checks `name` (a DNS name or an IP address) in every server's certificate, instead of
    /// the host of the address connected to, and sends it as the SNI when it is a DNS name.
    /// For private clusters reached by IP address whose certificates name a host.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Shows this certificate chain (leaf first) and its private key (PKCS#8, PKCS#1 or SEC1)
    /// to servers that ask for one (mutual TLS). Java's `tls.client.certPath` and
    /// `tls.client.keyPath`; encrypted keys are not supported.
    pub fn client_certificate_pem(
        mut self,
        chain: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Self {
        self.client_certificate = Some((Pem::Bytes(chain.into()), Pem::Bytes(key.into())));
        self
    }

    /// [`client_certificate_pem`](Self::client_certificate_pem) from PEM files (read by
    /// [`build`](Self::build)).
    pub fn client_certificate_pem_files(
        mut self,
        chain: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.client_certificate = Some((Pem::File(chain.into()), Pem::File(key.into())));
        self
    }

    /// **Insecure**: accepts any server certificate, as Java's client does with
    /// `tls.test.mode.enable=true` (its default): the traffic is encrypted, but anyone on the
    /// path can pose as the server. For test clusters whose servers make themselves a
    /// self-signed certificate. Cannot be combined with a CA or the platform's roots.
    pub fn insecure_trust_any_certificate(mut self) -> Self {
        self.trust_any = true;
        self
    }

    /// Reads the files and certificates, and checks that they can be used.
    pub fn build(self) -> Result<TlsConfig, TlsConfigError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsConfigError::Setup(e.to_string()))?;
        if self.trust_any && (self.platform_roots || !self.cas.is_empty()) {
            return Err(TlsConfigError::Conflict);
        }
        let server_name = self
            .server_name
            .as_deref()
            .map(|name| {
                ServerName::try_from(name.to_string())
                    .map_err(|_| TlsConfigError::ServerName(name.to_string()))
            })
            .transpose()?;
        let (verified, trust) = if self.trust_any {
            let verifier = TrustAnyCertificate::new(&provider);
            let trust = "INSECURE: any certificate".to_string();
            (
                versions
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(verifier)),
                trust,
            )
        } else {
            let (roots, trust) = self.roots()?;
            (versions.with_root_certificates(roots), trust)
        };
        let client = match &self.client_certificate {
            None => verified.with_no_client_auth(),
            Some((chain, key)) => {
                let (chain, key) = client_identity(chain, key)?;
                verified
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| TlsConfigError::ClientCertificate(e.to_string()))?
            }
        };
        Ok(TlsConfig {
            client: Arc::new(client),
            server_name,
            trust,
            insecure: self.trust_any,
            client_certificate: self.client_certificate.is_some(),
        })
    }

    /// The root store, and what it holds in words.
    fn roots(&self) -> Result<(RootCertStore, String), TlsConfigError> {
        let mut roots = RootCertStore::empty();
        let mut trust = Vec::new();
        if self.platform_roots || self.cas.is_empty() {
            let found = rustls_native_certs::load_native_certs();
            for error in &found.errors {
                tracing::warn!(%error, "cannot load some of the platform's root certificates");
            }
            let (added, ignored) = roots.add_parsable_certificates(found.certs);
            if ignored > 0 {
                tracing::debug!(ignored, "platform root certificates rustls cannot use");
            }
            if added == 0 && self.cas.is_empty() {
                let errors: Vec<String> = found.errors.iter().map(|e| e.to_string()).collect();
                return Err(TlsConfigError::NoRoots(if errors.is_empty() {
                    "the platform's store is empty".into()
                } else {
                    errors.join("; ")
                }));
            }
            trust.push(format!("{added} platform roots"));
        }
        for ca in &self.cas {
            let what = ca.describe("CA");
            let pem = ca.read("CA")?;
            let certs = certificates(&pem, &what)?;
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| TlsConfigError::BadCertificate {
                        what: what.clone(),
                        reason: e.to_string(),
                    })?;
            }
            trust.push(what);
        }
        Ok((roots, trust.join(", ")))
    }
}

/// Every certificate in `pem`; at least one.
fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsConfigError::Pem {
            what: what.to_string(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsConfigError::Empty {
            what: what.to_string(),
            expected: "certificate",
        });
    }
    Ok(certs)
}

/// The client's certificate chain and key.
fn client_identity(
    chain: &Pem,
    key: &Pem,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsConfigError> {
    let chain_what = chain.describe("client certificate");
    let certs = certificates(&chain.read("client certificate")?, &chain_what)?;
    let key_what = key.describe("client key");
    let key = PrivateKeyDer::from_pem_slice(&key.read("client key")?).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => TlsConfigError::Empty {
            what: key_what.clone(),
            expected: "private key (PKCS#8, PKCS#1 or SEC1, unencrypted)",
        },
        e => TlsConfigError::Pem {
            what: key_what.clone(),
            reason: e.to_string(),
        },
    })?;
    Ok((certs, key))
}

/// A TLS configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsConfigError {
    /// A file could not be read.
    #[error("cannot read the {what}: {reason}")]
    Read {
        /// Which file, and what it was to hold.
        what: String,
        /// Why.
        reason: String,
    },
    /// PEM data is malformed.
    #[error("the {what} is not valid PEM: {reason}")]
    Pem {
        /// Which data.
        what: String,
        /// Why.
        reason: String,
    },
    /// PEM data holds nothing of what it should.
    #[error("the {what} holds no {expected}")]
    Empty {
        /// Which data.
        what: String,
        /// What it should hold.
        expected: &'static str,
    },
    /// A CA certificate cannot be used as a trust anchor.
    #[error("the {what} cannot be trusted as a CA: {reason}")]
    BadCertificate {
        /// Which data.
        what: String,
        /// Why.
        reason: String,
    },
    /// No CA was given and the platform has no usable root certificate.
    #[error(
        "no root certificate to trust: {0}; give the cluster's CA with ca_pem_file, or install it in the system's store"
    )]
    NoRoots(String),
    /// The server-name override is neither a DNS name nor an IP address.
    #[error("`{0}` is not a server name (a DNS name or an IP address)")]
    ServerName(String),
    /// The client certificate and key do not go together, or are not supported.
    #[error("the client certificate cannot be used: {0}")]
    ClientCertificate(String),
    /// Trusting any certificate was asked together with a CA or the platform's roots.
    #[error(
        "insecure_trust_any_certificate() trusts every certificate; it cannot be combined with a CA or the platform's roots"
    )]
    Conflict,
    /// The TLS library refused the configuration.
    #[error("TLS setup failed: {0}")]
    Setup(String),
}
