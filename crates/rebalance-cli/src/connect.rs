//! How the commands that talk to a RocketMQ cluster (`send`, `plan`) connect to it: ACL
//! credentials, a namespace, and TLS, from their command-line flags.
//!
//! - `--access-key KEY --secret-key SECRET` sign every request (ACL 1.0 signing, which ACL 2.0
//!   brokers verify too); the secret may come from the environment variable
//!   [`SECRET_KEY_ENV`] instead, so that it is not on the command line. It is never printed:
//!   not in `--help`, not in errors, not in debug output. `--security-token` adds a session
//!   token.
//! - `--namespace NS` puts every topic and group in the namespace `NS` (`NS%Topic`); the output
//!   shows plain names.
//! - `--tls` connects over TLS (trusting the platform's roots), `--tls-ca FILE` trusts the PEM
//!   certificates of `FILE` instead, `--tls-server-name NAME` checks the servers' certificates
//!   against `NAME` rather than the address connected to, and `--tls-insecure` trusts any
//!   certificate (test clusters only). Any of them implies `--tls`. A `rebalance` built without
//!   the `tls` feature refuses them with a message saying so.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use rebalance_rocketmq::acl::CredentialsError;
use rebalance_rocketmq::{AddressError, ClientConfig, Credentials, NameServerClient, Namespace};

/// The environment variable the secret key is read from when `--secret-key` is not given.
pub const SECRET_KEY_ENV: &str = "ROCKETMQ_SECRET_KEY";

/// A secret from the command line or the environment: its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<hidden>)")
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Self(text.to_string()))
    }
}

/// The connection flags of a command (see the [module documentation](self)).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConnectArgs {
    /// The ACL access key: every request is signed with it and the secret key.
    #[arg(long, value_name = "KEY")]
    pub access_key: Option<String>,
    /// The ACL secret key (or from the ROCKETMQ_SECRET_KEY environment variable, which keeps it
    /// off the command line). Needs --access-key.
    #[arg(
        long,
        value_name = "SECRET",
        env = SECRET_KEY_ENV,
        hide_env_values = true
    )]
    pub secret_key: Option<Secret>,
    /// An ACL session token, sent and signed with every request. Needs --access-key.
    #[arg(long, value_name = "TOKEN")]
    pub security_token: Option<Secret>,
    /// Puts every topic and group in this namespace (`NS%Topic`, as the Java client's
    /// `setNamespace`); the output shows plain names.
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Connects over TLS (trusting the platform's root certificates).
    #[arg(long)]
    pub tls: bool,
    /// Trusts the PEM certificates of this file instead of the platform's roots (implies
    /// --tls).
    #[arg(long, value_name = "PEM_FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Checks the servers' certificates against this name instead of the address connected to
    /// (implies --tls).
    #[arg(long, value_name = "NAME")]
    pub tls_server_name: Option<String>,
    /// Trusts any certificate: for test clusters only (implies --tls).
    #[arg(long)]
    pub tls_insecure: bool,
}

/// Why the connection flags cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The name server list is unusable.
    #[error("--namesrv: {0}")]
    Address(#[from] AddressError),
    /// The credentials are incomplete or empty.
    #[error("credentials: {0}")]
    Credentials(String),
    /// The namespace is unusable.
    #[error("--namespace: {0}")]
    Namespace(#[from] rebalance_rocketmq::NamespaceError),
    /// The TLS settings are unusable (an unreadable or invalid CA file, ...).
    #[error("TLS: {0}")]
    Tls(String),
    /// A TLS flag was given to a binary built without TLS.
    #[error(
        "{0} needs TLS, and this `rebalance` was built without it: rebuild it with the `tls` feature (cargo build -p rebalance-cli --features tls)"
    )]
    TlsUnavailable(&'static str),
}

impl From<CredentialsError> for ConnectError {
    fn from(e: CredentialsError) -> Self {
        ConnectError::Credentials(e.to_string())
    }
}

impl ConnectArgs {
    /// Whether any TLS flag was given.
    pub fn wants_tls(&self) -> bool {
        self.tls || self.tls_ca.is_some() || self.tls_server_name.is_some() || self.tls_insecure
    }

    /// The credentials asked for, if any. A secret key from the environment alone is ignored
    /// (it may be set for another tool); one given with `--secret-key` needs `--access-key`.
    pub fn credentials(&self) -> Result<Option<Credentials>, ConnectError> {
        let Some(access_key) = &self.access_key else {
            if self.security_token.is_some() {
                return Err(ConnectError::Credentials(
                    "--security-token needs --access-key".into(),
                ));
            }
            let from_flag = self.secret_key.is_some() && std::env::var_os(SECRET_KEY_ENV).is_none();
            if from_flag {
                return Err(ConnectError::Credentials(
                    "--secret-key needs --access-key".into(),
                ));
            }
            return Ok(None);
        };
        let Some(secret) = &self.secret_key else {
            return Err(ConnectError::Credentials(format!(
                "--access-key needs a secret key: --secret-key, or the {SECRET_KEY_ENV} environment variable"
            )));
        };
        let credentials = Credentials::new(access_key.clone(), secret.expose())?;
        Ok(Some(match &self.security_token {
            Some(token) => credentials.with_security_token(token.expose()),
            None => credentials,
        }))
    }

    /// The namespace asked for, if any.
    pub fn namespace(&self) -> Result<Option<Namespace>, ConnectError> {
        self.namespace
            .as_deref()
            .map(Namespace::new)
            .transpose()
            .map_err(ConnectError::from)
    }

    /// A name server client for `namesrv` with these settings and `config`.
    pub fn name_server(
        &self,
        namesrv: &str,
        config: ClientConfig,
    ) -> Result<NameServerClient, ConnectError> {
        let mut builder = NameServerClient::builder(namesrv).client_config(config);
        if let Some(credentials) = self.credentials()? {
            builder = builder.credentials(credentials);
        }
        if let Some(namespace) = self.namespace()? {
            builder = builder.namespace(namespace);
        }
        let builder = self.with_tls(builder)?;
        Ok(builder.build()?)
    }

    #[cfg(feature = "tls")]
    fn with_tls(
        &self,
        builder: rebalance_rocketmq::NameServerClientBuilder,
    ) -> Result<rebalance_rocketmq::NameServerClientBuilder, ConnectError> {
        use rebalance_rocketmq::tls::TlsConfig;
        if !self.wants_tls() {
            return Ok(builder);
        }
        let mut tls = TlsConfig::builder();
        if let Some(ca) = &self.tls_ca {
            tls = tls.ca_pem_file(ca.clone());
        }
        if let Some(name) = &self.tls_server_name {
            tls = tls.server_name(name.clone());
        }
        if self.tls_insecure {
            tls = tls.insecure_trust_any_certificate();
        }
        let tls = tls.build().map_err(|e| ConnectError::Tls(e.to_string()))?;
        Ok(builder.tls(tls))
    }

    #[cfg(not(feature = "tls"))]
    fn with_tls(
        &self,
        builder: rebalance_rocketmq::NameServerClientBuilder,
    ) -> Result<rebalance_rocketmq::NameServerClientBuilder, ConnectError> {
        let flag = if self.tls_ca.is_some() {
            "--tls-ca"
        } else if self.tls_server_name.is_some() {
            "--tls-server-name"
        } else if self.tls_insecure {
            "--tls-insecure"
        } else if self.tls {
            "--tls"
        } else {
            return Ok(builder);
        };
        Err(ConnectError::TlsUnavailable(flag))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        connect: ConnectArgs,
    }

    fn parse(argv: &[&str]) -> ConnectArgs {
        let mut all = vec!["test"];
        all.extend(argv);
        Cli::try_parse_from(all).unwrap().connect
    }

    #[test]
    fn credentials_need_both_keys_and_never_show_the_secret() {
        let args = parse(&["--access-key", "ak", "--secret-key", "s3cr3t"]);
        let credentials = args.credentials().unwrap().unwrap();
        assert_eq!(credentials.access_key(), "ak");
        assert!(!format!("{args:?}").contains("s3cr3t"));
        assert!(!format!("{credentials:?}").contains("s3cr3t"));
        let token = parse(&[
            "--access-key",
            "ak",
            "--secret-key",
            "s",
            "--security-token",
            "tok",
        ]);
        assert_eq!(
            token.credentials().unwrap().unwrap().security_token(),
            Some("tok")
        );
        assert!(!format!("{token:?}").contains("tok\""));
        // Unless the environment has one, a lone key is an error naming what is missing.
        if std::env::var_os(SECRET_KEY_ENV).is_none() {
            let lone = parse(&["--access-key", "ak"]).credentials().unwrap_err();
            assert!(lone.to_string().contains(SECRET_KEY_ENV), "{lone}");
            let lone = parse(&["--secret-key", "s3cr3t"])
                .credentials()
                .unwrap_err();
            assert!(lone.to_string().contains("--access-key"), "{lone}");
            assert!(!lone.to_string().contains("s3cr3t"));
            assert!(parse(&[]).credentials().unwrap().is_none());
        }
        let empty = parse(&["--access-key", "", "--secret-key", "x"])
            .credentials()
            .unwrap_err();
        assert!(empty.to_string().contains("access key is empty"), "{empty}");
    }

    #[test]
    fn a_namespace_is_checked() {
        assert_eq!(
            parse(&["--namespace", "MQ_INST_1"])
                .namespace()
                .unwrap()
                .map(|n| n.to_string()),
            Some("MQ_INST_1".to_string())
        );
        let bad = parse(&["--namespace", "a%b"]).namespace().unwrap_err();
        assert!(bad.to_string().starts_with("--namespace: "), "{bad}");
    }

    #[test]
    fn the_client_carries_the_namespace() {
        let args = parse(&["--namespace", "NS"]);
        let client = args
            .name_server("127.0.0.1:9876", ClientConfig::default())
            .unwrap();
        assert_eq!(client.namespace().map(|n| n.as_str()), Some("NS"));
        assert_eq!(client.wire_name("T"), "NS%T");
    }

    #[test]
    fn tls_flags_imply_tls() {
        assert!(!parse(&[]).wants_tls());
        for flags in [
            &["--tls"][..],
            &["--tls-ca", "ca.pem"],
            &["--tls-server-name", "mq"],
            &["--tls-insecure"],
        ] {
            assert!(parse(flags).wants_tls(), "{flags:?}");
        }
    }

    #[cfg(feature = "tls")]
    #[test]
    fn an_unreadable_ca_file_is_a_tls_error() {
        let e = parse(&["--tls-ca", "/nonexistent/ca.pem"])
            .name_server("127.0.0.1:9876", ClientConfig::default())
            .unwrap_err();
        assert!(matches!(e, ConnectError::Tls(_)), "{e}");
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
        let insecure = parse(&["--tls-insecure"])
            .name_server("127.0.0.1:9876", ClientConfig::default())
            .unwrap();
        assert!(insecure.remoting().tls().is_some());
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn without_the_feature_tls_flags_say_so() {
        let e = parse(&["--tls"])
            .name_server("127.0.0.1:9876", ClientConfig::default())
            .unwrap_err();
        assert!(e.to_string().contains("built without"), "{e}");
    }
}
