//! ACL 1.0 request signing, as the Java client's `AclClientRPCHook` does it, and how servers say
//! no.
//!
//! With [`Credentials`] configured (see
//! [`NameServerClientBuilder::credentials`](crate::name_server::NameServerClientBuilder::credentials)),
//! every request the client sends, to name servers and brokers, sync and one-way, carries the
//! extension fields `AccessKey`, `SecurityToken` (only when one is configured) and `Signature`:
//! the standard Base64 of HMAC-SHA1 keyed with the secret key over the values of every other
//! extension field, ordered by key (Java's `TreeMap`: UTF-16 code-unit order), concatenated
//! without separators, followed by the body. Responses to the servers' requests are not signed
//! (no server verifies them).
//!
//! ```
//! use rebalance_rocketmq::acl::{Credentials, sign};
//! use rebalance_rocketmq::{RemotingCommand, request_code};
//!
//! let credentials = Credentials::new("rocketmq2", "12345678").unwrap();
//! let mut request = RemotingCommand::request(request_code::GET_CONSUMER_LIST_BY_GROUP)
//!     .with_ext("consumerGroup", "please_rename_unique_group_name");
//! sign(&mut request, &credentials);
//! assert_eq!(request.ext("AccessKey"), Some("rocketmq2"));
//! assert_eq!(request.ext("Signature"), Some("MRwyTYy8MuJvs5x4lAqqzgndZj8="));
//! ```

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use hmac::{KeyInit, Mac};

use crate::command::{RemotingCommand, response_code};

/// The extension field carrying the access key.
pub const ACCESS_KEY: &str = "AccessKey";
/// The extension field carrying the session token, when one is configured.
pub const SECURITY_TOKEN: &str = "SecurityToken";
/// The extension field carrying the signature.
pub const SIGNATURE: &str = "Signature";

/// An access key and its secret (and optionally a session token), as an ACL 1.0 account or an
/// ACL 2.0 user (user name and password) is configured on the brokers. Its `Debug` form hides
/// the secret and the token.
///
/// ```
/// use rebalance_rocketmq::acl::{Credentials, CredentialsError};
///
/// let credentials = Credentials::new("ak", "sk").unwrap().with_security_token("tok");
/// assert_eq!(credentials.access_key(), "ak");
/// assert!(!format!("{credentials:?}").contains("sk"));
/// assert_eq!(Credentials::new("", "sk").unwrap_err(), CredentialsError::EmptyAccessKey);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    access_key: String,
    secret_key: String,
    security_token: Option<String>,
}

/// Credentials that cannot sign anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialsError {
    /// The access key is empty: the servers would refuse every request.
    #[error("the access key is empty")]
    EmptyAccessKey,
    /// The secret key is empty: the servers would refuse every request.
    #[error("the secret key is empty")]
    EmptySecretKey,
}

impl Credentials {
    /// An access key and its secret key.
    pub fn new(
        access_key: impl Into<String>,
        secret_key: impl Into<String>,
    ) -> Result<Self, CredentialsError> {
        let (access_key, secret_key) = (access_key.into(), secret_key.into());
        if access_key.is_empty() {
            return Err(CredentialsError::EmptyAccessKey);
        }
        if secret_key.is_empty() {
            return Err(CredentialsError::EmptySecretKey);
        }
        Ok(Self {
            access_key,
            secret_key,
            security_token: None,
        })
    }

    /// Adds a session token, sent as `SecurityToken` and signed with the other fields.
    pub fn with_security_token(mut self, token: impl Into<String>) -> Self {
        self.security_token = Some(token.into());
        self
    }

    /// The access key.
    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    /// The secret key (for the test kit, which configures servers with it).
    #[cfg_attr(not(feature = "testkit"), allow(dead_code))]
    pub(crate) fn secret_key(&self) -> &str {
        &self.secret_key
    }

    /// The session token, if any.
    pub fn security_token(&self) -> Option<&str> {
        self.security_token.as_deref()
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<hidden>")
            .field(
                "security_token",
                &self.security_token.as_ref().map(|_| "<hidden>"),
            )
            .finish()
    }
}

/// Adds `AccessKey` (and `SecurityToken`) to `request`, then its `Signature` (replacing any
/// earlier one). Nothing may be added to the request afterwards: the server would compute
/// another content and refuse it.
pub fn sign(request: &mut RemotingCommand, credentials: &Credentials) {
    request
        .ext_fields
        .insert(ACCESS_KEY.to_string(), credentials.access_key.clone());
    if let Some(token) = &credentials.security_token {
        request
            .ext_fields
            .insert(SECURITY_TOKEN.to_string(), token.clone());
    }
    let content = signed_content(&request.ext_fields, &request.body);
    let signature = signature(&credentials.secret_key, &content);
    request.ext_fields.insert(SIGNATURE.to_string(), signature);
}

/// What is signed: the values of every extension field but `Signature`, in Java's `TreeMap`
/// order of their keys (UTF-16 code units, which for ASCII keys is byte order), with no keys and
/// no separators, then the body.
///
/// ```
/// use std::collections::BTreeMap;
/// use rebalance_rocketmq::acl::signed_content;
///
/// let ext = BTreeMap::from([("z".to_string(), "last".to_string()),
///                           ("a".to_string(), "first".to_string()),
///                           ("Signature".to_string(), "stale".to_string())]);
/// assert_eq!(signed_content(&ext, b"body"), b"firstlastbody");
/// ```
pub fn signed_content(ext_fields: &BTreeMap<String, String>, body: &[u8]) -> Vec<u8> {
    let mut fields: Vec<(&String, &String)> = ext_fields
        .iter()
        .filter(|(key, _)| key.as_str() != SIGNATURE)
        .collect();
    // A BTreeMap orders by UTF-8 bytes, which differs from UTF-16 order only for characters
    // above U+FFFF against U+E000..U+FFFF; sorted again to be Java-exact for any key.
    fields.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
    let len = fields.iter().map(|(_, v)| v.len()).sum::<usize>() + body.len();
    let mut content = Vec::with_capacity(len);
    for (_, value) in fields {
        content.extend_from_slice(value.as_bytes());
    }
    content.extend_from_slice(body);
    content
}

/// Base64 (standard alphabet, padded) of HMAC-SHA1 of `content` keyed with the UTF-8 bytes of
/// `secret_key`: Java's `AclSigner.calSignature`.
///
/// ```
/// assert_eq!(rebalance_rocketmq::acl::signature("12345678", b"RocketMQ"),
///            "IUc8rrO/0gDch8CjObLQsW2rsiA=");
/// ```
pub fn signature(secret_key: &str, content: &[u8]) -> String {
    // HMAC takes keys of any length, so this never fails; were it to, the empty signature
    // would be refused by the server (a typed denial), not panic here.
    let Ok(mut mac) = hmac::Hmac::<sha1::Sha1>::new_from_slice(secret_key.as_bytes()) else {
        return String::new();
    };
    mac.update(content);
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// ACL 2.0 (Java 5.3+): the user named by the access key does not exist.
pub const USER_NOT_EXIST: i32 = 3001;
/// ACL 2.0 (Java 5.3+): no policy grants the user anything.
pub const POLICY_NOT_EXIST: i32 = 3002;

/// Whether `response` says the server refused this client's credentials or permissions:
/// NO_PERMISSION (16: Java 5.3+ ACL 2.0 and the Rust broker, for a missing, wrong or unknown
/// signature as for a missing permission), the ACL 2.0 codes 3001 and 3002, or the
/// SYSTEM_ERROR (1) with an `AclException` remark that Java 4.9 to 5.3.2 brokers answer with
/// ACL 1.0.
///
/// Not a NO_PERMISSION that an operator's switch answers for everyone (found by review: it
/// was reported as a credential problem, with the advice to check the secret, and retried
/// after up to 60 s once the switch was turned back): a broker or topic made unreadable or
/// unwritable (`the broker[..] pulling message is forbidden`, `the topic[..] sending message
/// is forbidden`, and so on, from Java and Rust brokers alike), or a group whose consumption
/// is disabled (`subscription group no permission, G`). Those are ordinary refusals, retried
/// on the usual schedule.
pub fn is_denial(response: &RemotingCommand) -> bool {
    match response.code {
        response_code::NO_PERMISSION => !is_operator_switch(response.remark_or_empty()),
        USER_NOT_EXIST | POLICY_NOT_EXIST => true,
        response_code::SYSTEM_ERROR => response.remark_or_empty().contains("AclException"),
        _ => false,
    }
}

/// Whether a NO_PERMISSION remark names a permission an operator switched off for every
/// client (see [`is_denial`]).
fn is_operator_switch(remark: &str) -> bool {
    remark.contains("message is forbidden")
        || remark.starts_with("subscription group no permission")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::request_code;

    /// Reference vectors: those of the Java client's `AclSignerTest` and of the rocketmq-rust
    /// client's test, and requests a Rust broker 1.0.0 accepted.
    #[test]
    fn reference_vectors() {
        struct Vector {
            name: &'static str,
            code: i32,
            ext: &'static [(&'static str, &'static str)],
            body: &'static str,
            access_key: &'static str,
            token: Option<&'static str>,
            secret: &'static str,
            content: &'static str,
            signature: &'static str,
        }
        let vectors = [
            Vector {
                name: "1: sorted ext fields and body",
                code: 0,
                ext: &[("z", "last"), ("a", "first")],
                body: "body",
                access_key: "ak",
                token: Some("token"),
                secret: "secret",
                content: "aktokenfirstlastbody",
                signature: "wuJkFDNRMKY6aFXTDwT/vg0UC8M=",
            },
            Vector {
                name: "1b: a stale signature is left out and replaced",
                code: 0,
                ext: &[("z", "last"), ("a", "first"), ("Signature", "stale")],
                body: "body",
                access_key: "ak",
                token: Some("token"),
                secret: "secret",
                content: "aktokenfirstlastbody",
                signature: "wuJkFDNRMKY6aFXTDwT/vg0UC8M=",
            },
            Vector {
                name: "3: GET_CONSUMER_LIST_BY_GROUP",
                code: request_code::GET_CONSUMER_LIST_BY_GROUP,
                ext: &[("consumerGroup", "please_rename_unique_group_name")],
                body: "",
                access_key: "rocketmq2",
                token: None,
                secret: "12345678",
                content: "rocketmq2please_rename_unique_group_name",
                signature: "MRwyTYy8MuJvs5x4lAqqzgndZj8=",
            },
            Vector {
                name: "4: QUERY_CONSUMER_OFFSET with a token",
                code: request_code::QUERY_CONSUMER_OFFSET,
                ext: &[("consumerGroup", "G"), ("topic", "T"), ("queueId", "3")],
                body: "",
                access_key: "ak",
                token: Some("tok"),
                secret: "sk",
                content: "aktokG3T",
                signature: "KmnWGe9lnRLRnSH6nSwbVcbyclU=",
            },
            Vector {
                name: "5: HEART_BEAT, body only",
                code: request_code::HEART_BEAT,
                ext: &[],
                body: r#"{"clientID":"c1"}"#,
                access_key: "ak",
                token: None,
                secret: "sk",
                content: r#"ak{"clientID":"c1"}"#,
                signature: "3SNWBXvFTcYo7Mqv3BC2W3GXGxA=",
            },
        ];
        for v in vectors {
            let mut request = RemotingCommand::request(v.code).with_body(v.body.as_bytes());
            for (key, value) in v.ext {
                request = request.with_ext(*key, *value);
            }
            let mut credentials = Credentials::new(v.access_key, v.secret).unwrap();
            if let Some(token) = v.token {
                credentials = credentials.with_security_token(token);
            }
            sign(&mut request, &credentials);
            let content = signed_content(&request.ext_fields, &request.body);
            assert_eq!(String::from_utf8(content).unwrap(), v.content, "{}", v.name);
            assert_eq!(request.ext(SIGNATURE), Some(v.signature), "{}", v.name);
            assert_eq!(request.ext(ACCESS_KEY), Some(v.access_key), "{}", v.name);
            assert_eq!(request.ext(SECURITY_TOKEN), v.token, "{}", v.name);
        }
    }

    #[test]
    fn java_signer_vector() {
        // Vector 2: Java's AclSignerTest.
        assert_eq!(
            signature("12345678", b"RocketMQ"),
            "IUc8rrO/0gDch8CjObLQsW2rsiA="
        );
    }

    #[test]
    fn send_message_content_vector() {
        // Vector 6: Java's DefaultAuthenticationContextBuilderTest `build2` (content only).
        let request = RemotingCommand::request(request_code::SEND_MESSAGE)
            .with_ext("topic", "topic-test")
            .with_ext("queueId", 0)
            .with_ext("bornTimestamp", 117_036_786_441_330_i64)
            .with_ext("bname", "brokerName-1")
            .with_ext(ACCESS_KEY, "abc");
        assert_eq!(
            signed_content(&request.ext_fields, &request.body),
            b"abcbrokerName-11170367864413300topic-test"
        );
    }

    #[test]
    fn keys_sort_as_javas_tree_map_does() {
        // Upper case before `_` before lower case: Java's `TreeMap` of strings orders by UTF-16
        // code unit.
        let ext: BTreeMap<String, String> = [
            ("consumerGroup", "7"),
            ("bname", "6"),
            ("_UNIQUE_KEY_QUERY", "5"),
            ("Signature", "x"),
            ("SecurityToken", "3"),
            ("ReqT", "2"),
            ("AccessKey", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(signed_content(&ext, b""), b"123567");
        // UTF-16 order, not UTF-8: U+FF21 (one code unit) sorts after U+1F600 (a surrogate
        // pair starting 0xD83D), although its UTF-8 bytes sort first.
        let ext: BTreeMap<String, String> = [("\u{ff21}", "b"), ("\u{1f600}", "a")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(signed_content(&ext, b""), b"ab");
    }

    #[test]
    fn signing_again_replaces_the_signature() {
        let credentials = Credentials::new("ak", "sk").unwrap();
        let mut request = RemotingCommand::request(request_code::HEART_BEAT)
            .with_body(&br#"{"clientID":"c1"}"#[..]);
        sign(&mut request, &credentials);
        let first = request.ext(SIGNATURE).map(str::to_string);
        sign(&mut request, &credentials);
        assert_eq!(request.ext(SIGNATURE).map(str::to_string), first);
        assert_eq!(first.as_deref(), Some("3SNWBXvFTcYo7Mqv3BC2W3GXGxA="));
        // Another secret, another signature.
        let mut other = request.clone();
        sign(&mut other, &Credentials::new("ak", "wrong").unwrap());
        assert_ne!(other.ext(SIGNATURE), request.ext(SIGNATURE));
    }

    #[test]
    fn empty_keys_are_refused() {
        assert_eq!(
            Credentials::new("ak", ""),
            Err(CredentialsError::EmptySecretKey)
        );
        assert_eq!(
            Credentials::new("", "sk"),
            Err(CredentialsError::EmptyAccessKey)
        );
    }

    #[test]
    fn debug_hides_the_secrets() {
        let credentials = Credentials::new("my-access", "my-secret")
            .unwrap()
            .with_security_token("my-token");
        let text = format!("{credentials:?}");
        assert!(text.contains("my-access"), "{text}");
        assert!(
            !text.contains("my-secret") && !text.contains("my-token"),
            "{text}"
        );
    }

    #[test]
    fn denials_are_recognised() {
        let answer = |code, remark: &str| RemotingCommand::response(code, 1, Some(remark.into()));
        assert!(is_denial(&answer(
            16,
            "Authentication credentials are invalid"
        )));
        assert!(is_denial(&answer(3001, "User:x is not found.")));
        assert!(is_denial(&answer(3002, "")));
        assert!(is_denial(&answer(
            1,
            "org.apache.rocketmq.acl.common.AclException: Check signature failed for accessKey=rocketmq2"
        )));
        // Code 1 is also "no consumer for this group": not a denial.
        assert!(!is_denial(&answer(1, "no consumer for this group, G1")));
        assert!(!is_denial(&answer(0, "")));
        assert!(!is_denial(&answer(17, "topic not exist")));
        // An operator's switch, the same for every client: not this client's credentials.
        for remark in [
            "the broker[10.0.0.5] pulling message is forbidden",
            "the topic[T] pulling message is forbidden",
            "the topic[T] sending message is forbidden",
            "subscription group no permission, G",
        ] {
            assert!(!is_denial(&answer(16, remark)), "{remark}");
        }
        assert!(is_denial(&answer(16, "")));
    }
}
