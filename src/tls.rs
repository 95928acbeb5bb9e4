//! TLS contexts: what `tls-*` directives make of OpenSSL, for the TLS port, replication and
//! MIGRATE.
//!
//! Redis links OpenSSL, and its TLS directives are OpenSSL's vocabulary: `tls-ciphers` is an
//! OpenSSL cipher list ("DEFAULT:-AES128-SHA256"), `tls-ciphersuites` a TLS 1.3 suite list,
//! `tls-dh-params-file` a PEM DH parameter file, and `tls-protocols` may name TLS 1.0 and 1.1.
//! A TLS library with another vocabulary (rustls has no CBC suites, no DHE and no TLS 1.0/1.1)
//! would have to refuse values that an operator's redis.conf and Redis's own tests use, so
//! Podium builds its contexts with OpenSSL too (the `openssl` crate), the way Redis's `tls.c`
//! does, and each directive means what it means there.
//!
//! [`Contexts::build`] makes, from one [`Settings`], the server context (the TLS port's, and
//! the outgoing one when no client certificate is configured) and, when
//! `tls-client-cert-file` and `tls-client-key-file` are both set, a separate client context.
//! Building is all-or-nothing: a bad file or value leaves the contexts in use unchanged
//! ([`TlsState::configure`]), which is how CONFIG SET refuses it ("Unable to update TLS
//! configuration") and how certificate rotation reaches new connections while the ones
//! already open keep theirs. `tls-auth-clients` is applied per accepted connection
//! ([`Contexts::accepting`]), as Redis does.

use openssl::dh::Dh;
use openssl::pkey::PKey;
use openssl::ssl::{
    Ssl, SslContext, SslContextBuilder, SslMethod, SslMode, SslOptions, SslSessionCacheMode,
    SslVerifyMode,
};
use parking_lot::RwLock;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// `tls-auth-clients`: whether a TLS client must present a certificate the CA signed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthClients {
    No,
    Yes,
    Optional,
}

impl AuthClients {
    /// The directive's value (`yes`, `no`, `optional`); anything else is `yes`, the safe
    /// default (the configuration table only lets those three through).
    pub fn parse(value: &str) -> AuthClients {
        match value {
            "no" => AuthClients::No,
            "optional" => AuthClients::Optional,
            _ => AuthClients::Yes,
        }
    }

    fn verify_mode(self) -> SslVerifyMode {
        match self {
            AuthClients::No => SslVerifyMode::NONE,
            AuthClients::Optional => SslVerifyMode::PEER,
            AuthClients::Yes => SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT,
        }
    }

    fn code(self) -> u8 {
        match self {
            AuthClients::No => 0,
            AuthClients::Yes => 1,
            AuthClients::Optional => 2,
        }
    }

    fn from_code(code: u8) -> AuthClients {
        match code {
            0 => AuthClients::No,
            2 => AuthClients::Optional,
            _ => AuthClients::Yes,
        }
    }
}

/// The `tls-*` directives a context is built from (empty text = not set).
#[derive(Clone, Debug, Default)]
pub struct Settings {
    pub cert_file: String,
    pub key_file: String,
    pub key_file_pass: String,
    pub client_cert_file: String,
    pub client_key_file: String,
    pub client_key_file_pass: String,
    pub dh_params_file: String,
    pub ca_cert_file: String,
    pub ca_cert_dir: String,
    pub protocols: String,
    pub ciphers: String,
    pub ciphersuites: String,
    pub prefer_server_ciphers: bool,
    pub session_caching: bool,
    pub session_cache_size: i64,
    pub session_cache_timeout: i64,
    /// Whether a CA is needed: tls-auth-clients is not `no`, or tls-replication / tls-cluster
    /// make Podium a TLS client that verifies its peer.
    pub needs_ca: bool,
}

/// The protocol versions `tls-protocols` allows (empty: TLS 1.2 and 1.3, Redis's default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Protocols {
    v1_0: bool,
    v1_1: bool,
    v1_2: bool,
    v1_3: bool,
}

fn parse_protocols(text: &str) -> Result<Protocols, String> {
    if text.trim().is_empty() {
        return Ok(Protocols {
            v1_0: false,
            v1_1: false,
            v1_2: true,
            v1_3: true,
        });
    }
    let mut p = Protocols {
        v1_0: false,
        v1_1: false,
        v1_2: false,
        v1_3: false,
    };
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        match word.to_ascii_lowercase().as_str() {
            "tlsv1" => p.v1_0 = true,
            "tlsv1.1" => p.v1_1 = true,
            "tlsv1.2" => p.v1_2 = true,
            "tlsv1.3" => p.v1_3 = true,
            _ => {
                return Err("Invalid tls-protocols specified. Use a combination of 'TLSv1', 'TLSv1.1', 'TLSv1.2' and 'TLSv1.3'.".into())
            }
        }
    }
    Ok(p)
}

/// A path from a directive, checked for what OpenSSL's C API cannot take (a NUL byte).
fn path(text: &str) -> Result<&Path, String> {
    if text.contains('\0') {
        return Err(format!("Invalid file name: {text:?}"));
    }
    Ok(Path::new(text))
}

/// OpenSSL's error queue as one line.
fn why(e: openssl::error::ErrorStack) -> String {
    e.errors()
        .first()
        .map(|e| e.to_string())
        .unwrap_or_else(|| e.to_string())
}

/// A context with what the server and client sides share: protocol versions, modes,
/// certificate and key, the CA, cipher lists.
fn base_context(
    s: &Settings,
    protocols: Protocols,
    (cert_file, key_file, key_pass): (&str, &str, &str),
) -> Result<SslContextBuilder, String> {
    let mut b = SslContext::builder(SslMethod::tls()).map_err(why)?;
    let mut options = SslOptions::NO_SSLV2 | SslOptions::NO_SSLV3 | SslOptions::NO_COMPRESSION;
    options |= SslOptions::DONT_INSERT_EMPTY_FRAGMENTS;
    if !protocols.v1_0 {
        options |= SslOptions::NO_TLSV1;
    }
    if !protocols.v1_1 {
        options |= SslOptions::NO_TLSV1_1;
    }
    if !protocols.v1_2 {
        options |= SslOptions::NO_TLSV1_2;
    }
    if !protocols.v1_3 {
        options |= SslOptions::NO_TLSV1_3;
    }
    // TLS 1.0 and 1.1, when named, are still subject to the system OpenSSL's security level
    // (OpenSSL 3 refuses them at its default), exactly as for redis-server on the same host.
    b.set_options(options);
    // A write may be partial and may be retried from a buffer that moved (the output buffer
    // grows while a write waits), as Redis sets it.
    b.set_mode(SslMode::ENABLE_PARTIAL_WRITE | SslMode::ACCEPT_MOVING_WRITE_BUFFER);
    b.set_verify(SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT);
    b.set_certificate_chain_file(path(cert_file)?)
        .map_err(|e| format!("Failed to load certificate: {cert_file}: {}", why(e)))?;
    let pem = std::fs::read(path(key_file)?)
        .map_err(|e| format!("Failed to load private key: {key_file}: {e}"))?;
    // The passphrase form for every key: an unencrypted key ignores it, and an encrypted one
    // with no tls-key-file-pass fails here instead of OpenSSL asking on a terminal.
    let key = PKey::private_key_from_pem_passphrase(&pem, key_pass.as_bytes())
        .map_err(|e| format!("Failed to load private key: {key_file}: {}", why(e)))?;
    b.set_private_key(&key)
        .map_err(|e| format!("Failed to load private key: {key_file}: {}", why(e)))?;
    b.check_private_key()
        .map_err(|e| format!("Failed to load private key: {key_file}: {}", why(e)))?;
    if !s.ca_cert_file.is_empty() || !s.ca_cert_dir.is_empty() {
        let file = (!s.ca_cert_file.is_empty())
            .then(|| path(&s.ca_cert_file))
            .transpose()?;
        let dir = (!s.ca_cert_dir.is_empty())
            .then(|| path(&s.ca_cert_dir))
            .transpose()?;
        b.load_verify_locations(file, dir).map_err(|e| {
            format!(
                "Failed to configure CA certificate(s) file/directory: {}",
                why(e)
            )
        })?;
    }
    if !s.ciphers.is_empty() {
        b.set_cipher_list(&s.ciphers)
            .map_err(|_| format!("Failed to configure ciphers: {}", s.ciphers))?;
    }
    if !s.ciphersuites.is_empty() {
        b.set_ciphersuites(&s.ciphersuites)
            .map_err(|_| format!("Failed to configure ciphersuites: {}", s.ciphersuites))?;
    }
    Ok(b)
}

extern "C" {
    // libssl's SSL_CTX_set_timeout, which openssl-sys does not declare: the lifetime of a
    // cached session, in seconds.
    fn SSL_CTX_set_timeout(ctx: *mut openssl_sys::SSL_CTX, t: libc::c_long) -> libc::c_long;
}

/// The server side: session cache, renegotiation, cipher preference, DH parameters.
fn server_extras(b: &mut SslContextBuilder, s: &Settings) -> Result<(), String> {
    if s.session_caching {
        b.set_session_cache_mode(SslSessionCacheMode::SERVER);
        b.set_session_cache_size(s.session_cache_size.clamp(0, i64::from(i32::MAX)) as i32);
        // SAFETY: the builder owns a live SSL_CTX for the whole call; SSL_CTX_set_timeout
        // only stores a number in it. Covered by `contexts_build_from_test_certificates`.
        unsafe {
            SSL_CTX_set_timeout(b.as_ptr(), s.session_cache_timeout.max(0) as libc::c_long);
        }
        b.set_session_id_context(b"redis").map_err(why)?;
    } else {
        b.set_session_cache_mode(SslSessionCacheMode::OFF);
    }
    let mut options = SslOptions::NO_RENEGOTIATION | SslOptions::SINGLE_DH_USE;
    if s.prefer_server_ciphers {
        options |= SslOptions::CIPHER_SERVER_PREFERENCE;
    }
    b.set_options(options);
    if s.dh_params_file.is_empty() {
        // SAFETY: as above, on the builder's live SSL_CTX (a ctrl call that sets a flag).
        unsafe {
            openssl_sys::SSL_CTX_set_dh_auto(b.as_ptr(), 1);
        }
    } else {
        let file = &s.dh_params_file;
        let pem = std::fs::read(path(file)?).map_err(|e| format!("Failed to load {file}: {e}"))?;
        let dh =
            Dh::params_from_pem(&pem).map_err(|_| format!("{file}: failed to read DH params."))?;
        b.set_tmp_dh(&dh)
            .map_err(|e| format!("Failed to load DH params file: {file}: {}", why(e)))?;
    }
    Ok(())
}

/// The contexts one configuration makes.
pub struct Contexts {
    server: SslContext,
    /// Present when a client certificate is configured; otherwise outgoing connections use
    /// the server context (and its certificate), as Redis does.
    client: Option<SslContext>,
}

impl Contexts {
    /// Build both contexts, or say why not (the text Redis logs).
    pub fn build(s: &Settings) -> Result<Contexts, String> {
        if s.cert_file.is_empty() {
            return Err("No tls-cert-file configured!".into());
        }
        if s.key_file.is_empty() {
            return Err("No tls-key-file configured!".into());
        }
        if s.needs_ca && s.ca_cert_file.is_empty() && s.ca_cert_dir.is_empty() {
            return Err("Either tls-ca-cert-file or tls-ca-cert-dir must be specified when tls-cluster, tls-replication or tls-auth-clients are enabled!".into());
        }
        let protocols = parse_protocols(&s.protocols)?;
        let mut server = base_context(s, protocols, (&s.cert_file, &s.key_file, &s.key_file_pass))?;
        server_extras(&mut server, s)?;
        let client = if !s.client_cert_file.is_empty() && !s.client_key_file.is_empty() {
            let c = base_context(
                s,
                protocols,
                (
                    &s.client_cert_file,
                    &s.client_key_file,
                    &s.client_key_file_pass,
                ),
            )?;
            Some(c.build())
        } else {
            None
        };
        Ok(Contexts {
            server: server.build(),
            client,
        })
    }

    /// A session for a client accepted on the TLS port, verifying its certificate as
    /// `auth` says.
    pub fn accepting(&self, auth: AuthClients) -> Result<Ssl, String> {
        let mut ssl = Ssl::new(&self.server).map_err(why)?;
        ssl.set_verify(auth.verify_mode());
        Ok(ssl)
    }

    /// A session for a connection Podium opens (to a master, or MIGRATE's target): the
    /// client context if there is one, else the server's, and the peer's certificate must
    /// chain to the CA.
    pub fn connecting(&self) -> Result<Ssl, String> {
        let ctx = self.client.as_ref().unwrap_or(&self.server);
        let mut ssl = Ssl::new(ctx).map_err(why)?;
        ssl.set_connect_state();
        Ok(ssl)
    }
}

/// The contexts in use, replaced whole when the configuration changes, and tls-auth-clients.
#[derive(Default)]
pub struct TlsState {
    current: RwLock<Option<Arc<Contexts>>>,
    auth: AtomicU8,
}

impl TlsState {
    /// Build from `settings` and, if that works, use the result for new connections. Err
    /// (the reason, to log) leaves the contexts in use as they were.
    pub fn configure(&self, settings: &Settings) -> Result<(), String> {
        let built = Contexts::build(settings)?;
        *self.current.write() = Some(Arc::new(built));
        Ok(())
    }

    /// The contexts for a new connection; None before TLS was ever configured.
    pub fn current(&self) -> Option<Arc<Contexts>> {
        self.current.read().clone()
    }

    pub fn set_auth_clients(&self, auth: AuthClients) {
        self.auth.store(auth.code(), Ordering::Relaxed);
    }

    pub fn auth_clients(&self) -> AuthClients {
        AuthClients::from_code(self.auth.load(Ordering::Relaxed))
    }

    /// A session for a client accepted on the TLS port now.
    pub fn accepting(&self) -> Result<Ssl, String> {
        match self.current() {
            Some(c) => c.accepting(self.auth_clients()),
            None => Err("TLS is not configured".into()),
        }
    }

    /// A session for a connection accepted elsewhere than the client port, verifying the
    /// peer's certificate as `auth` says (the cluster bus: always `Yes`, as in Redis).
    pub fn accepting_with(&self, auth: AuthClients) -> Result<Ssl, String> {
        match self.current() {
            Some(c) => c.accepting(auth),
            None => Err("TLS is not configured".into()),
        }
    }

    /// A session for an outgoing TLS connection now.
    pub fn connecting(&self) -> Result<Ssl, String> {
        match self.current() {
            Some(c) => c.connecting(),
            None => Err("TLS is not configured".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_parse_as_redis_reads_them() {
        let p = parse_protocols("").unwrap();
        assert!(p.v1_2 && p.v1_3 && !p.v1_0 && !p.v1_1);
        let p = parse_protocols("TLSv1.2").unwrap();
        assert!(p.v1_2 && !p.v1_3);
        let p = parse_protocols("tlsv1 TLSv1.1  TLSv1.3").unwrap();
        assert!(p.v1_0 && p.v1_1 && !p.v1_2 && p.v1_3);
        assert!(parse_protocols("TLSv1.4").unwrap_err().contains("Invalid"));
        assert!(parse_protocols("SSLv3").is_err());
    }

    #[test]
    fn auth_clients_round_trips() {
        for a in [AuthClients::No, AuthClients::Yes, AuthClients::Optional] {
            assert_eq!(AuthClients::from_code(a.code()), a);
        }
        assert_eq!(AuthClients::parse("optional"), AuthClients::Optional);
        assert_eq!(AuthClients::parse("no"), AuthClients::No);
        assert_eq!(AuthClients::parse("yes"), AuthClients::Yes);
    }

    /// Makes a self-signed certificate and key with the openssl library and writes them as
    /// PEM files in `dir`.
    fn self_signed(dir: &Path) -> (String, String) {
        use openssl::asn1::Asn1Time;
        use openssl::hash::MessageDigest;
        use openssl::rsa::Rsa;
        use openssl::x509::{X509NameBuilder, X509};
        let key = PKey::from_rsa(Rsa::generate(2048).expect("rsa")).expect("pkey");
        let mut name = X509NameBuilder::new().expect("name");
        name.append_entry_by_text("CN", "podium-test").expect("cn");
        let name = name.build();
        let mut cert = X509::builder().expect("x509");
        cert.set_version(2).expect("version");
        cert.set_subject_name(&name).expect("subject");
        cert.set_issuer_name(&name).expect("issuer");
        cert.set_pubkey(&key).expect("pubkey");
        cert.set_not_before(&Asn1Time::days_from_now(0).expect("t0"))
            .expect("not before");
        cert.set_not_after(&Asn1Time::days_from_now(1).expect("t1"))
            .expect("not after");
        cert.sign(&key, MessageDigest::sha256()).expect("sign");
        let cert = cert.build();
        let cert_path = dir.join("c.crt");
        let key_path = dir.join("c.key");
        std::fs::write(&cert_path, cert.to_pem().expect("pem")).expect("write cert");
        std::fs::write(&key_path, key.private_key_to_pem_pkcs8().expect("pem")).expect("key");
        (
            cert_path.to_string_lossy().into_owned(),
            key_path.to_string_lossy().into_owned(),
        )
    }

    #[test]
    fn contexts_build_from_test_certificates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = self_signed(dir.path());
        let mut s = Settings {
            cert_file: cert.clone(),
            key_file: key.clone(),
            ca_cert_file: cert.clone(),
            needs_ca: true,
            session_caching: true,
            session_cache_size: 100,
            session_cache_timeout: 300,
            ..Settings::default()
        };
        let state = TlsState::default();
        state.configure(&s).expect("configure");
        assert!(state.accepting().is_ok());
        assert!(state.connecting().is_ok());
        // A failed build leaves the working contexts in place.
        let before = state.current().expect("configured");
        s.key_file = dir
            .path()
            .join("missing.key")
            .to_string_lossy()
            .into_owned();
        let e = state.configure(&s).unwrap_err();
        assert!(e.starts_with("Failed to load private key"), "{e}");
        assert!(Arc::ptr_eq(&before, &state.current().expect("still there")));
        s.key_file = key.clone();
        s.ciphers = "NOT-A-CIPHER".into();
        assert!(state.configure(&s).unwrap_err().contains("ciphers"));
        s.ciphers = String::new();
        s.ca_cert_file = String::new();
        assert!(state
            .configure(&s)
            .unwrap_err()
            .contains("tls-ca-cert-file"));
        s.needs_ca = false;
        state.configure(&s).expect("no CA needed");
        s.dh_params_file = dir.path().join("none.dh").to_string_lossy().into_owned();
        assert!(state
            .configure(&s)
            .unwrap_err()
            .starts_with("Failed to load"));
    }
}
