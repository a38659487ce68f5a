//! `--web-config FILE`: TLS and basic authentication in the format every Prometheus
//! exporter reads (the exporter-toolkit's `web-config.yml`, as node_exporter,
//! smokeping_prober and blackbox_exporter take it with `--web.config.file`), so a
//! file written for one of them works here unchanged:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: agent.crt          # or cert: <PEM text>; paths relative to this file
//!   key_file: agent.key           # or key: <PEM text>
//!   client_auth_type: RequireAndVerifyClientCert   # needs client_ca_file or client_ca
//!   client_ca_file: ca.crt        # or client_ca: <PEM text>
//!   min_version: TLS12            # TLS12 or TLS13 (rustls speaks no older TLS)
//!   max_version: TLS13
//!   cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]   # TLS 1.2 only, as in Go
//!   curve_preferences: [X25519, CurveP256]
//!   prefer_server_cipher_suites: true
//! http_server_config:
//!   headers: {Strict-Transport-Security: max-age=31536000}
//! basic_auth_users:
//!   prometheus: $2y$10$...        # bcrypt hashes, e.g. htpasswd -nBC 10 "" | tr -d ':\n'
//! rate_limit:                     # requests from all clients together, counted
//!                                 # before authentication as the toolkit does: 429
//!   interval: 100ms               # one more allowed per interval…
//!   burst: 20                     # …up to this many at once
//! ```
//!
//! The certificate, key and CA files are read again when they change (looked at
//! once a second at most), as the toolkit reads them per handshake, so a renewed
//! certificate is served without a restart.
//!
//! Unknown keys are refused, as the toolkit's strict YAML decoding refuses them, so a
//! typo never silently turns TLS or authentication off. What rustls cannot do (TLS 1.0
//! and 1.1, a client certificate taken without verifying it, CurveP521) is refused by
//! name rather than weakened.

use base64::Engine;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Largest web config file read: the toolkit's files are a few hundred bytes, a few
/// KiB with a certificate inline. (A 400 KB file of nested brackets once took the
/// YAML parser over a minute.)
const MAX_FILE_BYTES: u64 = 64 << 10;
/// Largest certificate, key or CA file read (a CA bundle is a few hundred KiB).
const MAX_PEM_BYTES: u64 = 1 << 20;
/// Successful logins remembered, so a scraper's every request does not pay a bcrypt
/// verification (tens of ms each); the toolkit caches them the same way.
const AUTH_CACHE_MAX: usize = 1024;
/// A valid bcrypt hash of a random string, verified for unknown users so that a wrong
/// user name takes as long as a wrong password (the toolkit does the same).
const DUMMY_HASH: &str = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi";

/// Errors reading or applying a web config file.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    /// The file cannot be read, is not a regular file, or is too large.
    #[error(transparent)]
    File(#[from] crate::kernel::fs::FileError),
    /// The YAML does not parse, or has a key the format does not have.
    #[error("web config {path}")]
    Yaml {
        /// The web config file (`--web-config`).
        path: PathBuf,
        /// The YAML parser's error.
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// A value is outside what the format (or rustls) allows.
    #[error("web config {path}: {why}")]
    Invalid {
        /// The web config file (`--web-config`).
        path: PathBuf,
        /// What is wrong, naming the key where there is one.
        why: String,
    },
    /// A certificate or key file cannot be read or parsed.
    #[error("web config {path}: {what} {file}")]
    Pem {
        /// The web config file (`--web-config`).
        path: PathBuf,
        /// What was being parsed: "certificate", "private key" or "client CA".
        what: &'static str,
        /// The file it came from, or `(cert)`, `(key)`, `(client_ca)` for PEM text
        /// given inline.
        file: String,
        /// Why the PEM could not be parsed.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// rustls refused the certificates, key or settings.
    #[error("web config {path}: TLS settings")]
    Tls {
        /// The web config file (`--web-config`).
        path: PathBuf,
        /// What rustls said.
        #[source]
        source: rustls::Error,
    },
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    tls_server_config: Option<TlsFile>,
    #[serde(default)]
    http_server_config: Option<HttpFile>,
    #[serde(default)]
    basic_auth_users: Option<BTreeMap<String, String>>,
    #[serde(default)]
    rate_limit: Option<RateLimitFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimitFile {
    #[serde(default)]
    burst: u32,
    /// A Go duration (`100ms`, `1s`, `1m30s`); absent or 0 turns the limit off.
    #[serde(default)]
    interval: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    #[serde(default)]
    cert_file: String,
    #[serde(default)]
    key_file: String,
    #[serde(default)]
    cert: String,
    #[serde(default)]
    key: String,
    #[serde(default)]
    client_auth_type: String,
    #[serde(default)]
    client_ca_file: String,
    #[serde(default)]
    client_ca: String,
    #[serde(default)]
    client_allowed_sans: Vec<String>,
    #[serde(default)]
    min_version: String,
    #[serde(default)]
    max_version: String,
    #[serde(default)]
    cipher_suites: Vec<String>,
    #[serde(default)]
    prefer_server_cipher_suites: Option<bool>,
    #[serde(default)]
    curve_preferences: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    #[serde(default)]
    http2: Option<bool>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// Response headers the toolkit lets a config add (it refuses the rest).
const ALLOWED_HEADERS: [&str; 5] = [
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
];

/// A web config, read and checked: what the endpoint serves with.
pub struct WebConfig {
    /// TLS, when the file has a `tls_server_config`.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Extra response headers.
    pub headers: Vec<(String, String)>,
    /// The certificate, key and CA files read: a change to any is a new config.
    pub files: Vec<PathBuf>,
    auth: Option<BasicAuth>,
    rate: Option<Mutex<Bucket>>,
}

/// The toolkit's `rate_limit` (Go's `rate.Limiter`): a bucket of `burst` requests,
/// full at start, refilled by one each `interval`.
#[derive(Debug)]
struct Bucket {
    burst: f64,
    interval: Duration,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(burst: u32, interval: Duration, now: Instant) -> Self {
        Self {
            burst: f64::from(burst),
            interval,
            tokens: f64::from(burst),
            at: now,
        }
    }

    /// Take a request's token at `now`, if one is left.
    fn allow(&mut self, now: Instant) -> bool {
        let refill =
            now.saturating_duration_since(self.at).as_secs_f64() / self.interval.as_secs_f64();
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = self.at.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the hashes.
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field("headers", &self.headers)
            .field("basic_auth", &self.auth.is_some())
            .field("rate_limit", &self.rate)
            .finish()
    }
}

/// The outcome of checking a request's credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// No users are configured, or the credentials match one.
    Allowed,
    /// Credentials are missing or wrong: answer 401 with a Basic challenge.
    Denied,
}

struct BasicAuth {
    users: HashMap<String, String>,
    /// SHA-256 of "user\0password\0hash" of logins that succeeded.
    cache: Mutex<HashMap<[u8; 32], ()>>,
}

impl WebConfig {
    /// Plain HTTP, no authentication.
    pub fn none() -> Self {
        Self {
            tls: None,
            headers: Vec::new(),
            files: Vec::new(),
            auth: None,
            rate: None,
        }
    }

    /// Read and check `path`.
    ///
    /// # Errors
    /// The file cannot be read, is not the toolkit's format, or names a certificate,
    /// key or setting that cannot be used.
    pub fn read(path: &Path) -> Result<Self, WebConfigError> {
        let text = crate::kernel::fs::read_text(path, "web config", MAX_FILE_BYTES)?;
        Self::parse(&text, path)
    }

    /// Check a config's text; relative file names are taken from `path`'s directory.
    ///
    /// # Errors
    /// As [`WebConfig::read`].
    pub fn parse(text: &str, path: &Path) -> Result<Self, WebConfigError> {
        let invalid = |why: String| WebConfigError::Invalid {
            path: path.to_owned(),
            why,
        };
        let file: File = if text.trim().is_empty() {
            File::default()
        } else {
            serde_yaml_ng::from_str(text).map_err(|source| WebConfigError::Yaml {
                path: path.to_owned(),
                source,
            })?
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut files = Vec::new();
        let tls = match file.tls_server_config {
            Some(t) => Some(Arc::new(tls_config(&t, dir, path, &mut files)?)),
            None => None,
        };
        let rate = match file.rate_limit {
            Some(r) if !r.interval.is_empty() => {
                let interval = humantime::parse_duration(&r.interval)
                    .map_err(|e| invalid(format!("rate_limit.interval {:?}: {e}", r.interval)))?;
                (!interval.is_zero())
                    .then(|| Mutex::new(Bucket::new(r.burst, interval, Instant::now())))
            }
            _ => None,
        };
        let http = file.http_server_config.unwrap_or_default();
        if http.http2 == Some(true) {
            // HTTP/2 is not offered (no ALPN "h2"): every scraper falls back to
            // HTTP/1.1, which is what Prometheus uses by default.
        }
        let mut headers = Vec::new();
        for (name, value) in http.headers {
            let Some(canon) = ALLOWED_HEADERS
                .iter()
                .find(|h| h.eq_ignore_ascii_case(&name))
            else {
                return Err(invalid(format!(
                    "http_server_config.headers: {name:?} is not one of {}",
                    ALLOWED_HEADERS.join(", ")
                )));
            };
            if hyper::header::HeaderValue::from_str(&value).is_err() {
                return Err(invalid(format!(
                    "http_server_config.headers.{name}: not a valid header value"
                )));
            }
            headers.push(((*canon).to_owned(), value));
        }
        let auth = match file.basic_auth_users {
            Some(users) if !users.is_empty() => {
                for (user, hash) in &users {
                    if user.contains(':') {
                        return Err(invalid(format!(
                            "basic_auth_users: user name {user:?} has a ':'"
                        )));
                    }
                    if hash.parse::<bcrypt::HashParts>().is_err() {
                        return Err(invalid(format!(
                            "basic_auth_users.{user}: not a bcrypt hash (make one with: htpasswd -nBC 10 \"\" | tr -d ':\\n')"
                        )));
                    }
                }
                Some(BasicAuth {
                    users: users.into_iter().collect(),
                    cache: Mutex::new(HashMap::new()),
                })
            }
            _ => None,
        };
        Ok(Self {
            tls,
            headers,
            files,
            auth,
            rate,
        })
    }

    /// Whether a request may be served now under `rate_limit` (always, without one).
    pub fn within_rate(&self) -> bool {
        self.rate.as_ref().is_none_or(|b| {
            b.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .allow(Instant::now())
        })
    }

    /// Whether requests need credentials at all.
    pub fn needs_auth(&self) -> bool {
        self.auth.is_some()
    }

    /// Check an `Authorization` header's value. Runs bcrypt (tens of ms) unless the
    /// login succeeded before: call it off the event loop.
    pub fn check(&self, authorization: Option<&[u8]>) -> Auth {
        let Some(auth) = &self.auth else {
            return Auth::Allowed;
        };
        let Some((user, password)) = authorization.and_then(parse_basic) else {
            return Auth::Denied;
        };
        let hash = auth.users.get(&user);
        let key = login_key(&user, &password, hash.map_or("", String::as_str));
        if hash.is_some() && auth.remembers(&key) {
            return Auth::Allowed;
        }
        let ok = bcrypt::verify(&password, hash.map_or(DUMMY_HASH, String::as_str))
            .unwrap_or(false)
            && hash.is_some();
        if !ok {
            return Auth::Denied;
        }
        let mut cache = auth
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.len() >= AUTH_CACHE_MAX {
            cache.clear();
        }
        cache.insert(key, ());
        Auth::Allowed
    }

    /// The verdict on `authorization` when it needs no bcrypt: allowed when no users
    /// are configured or the login succeeded before, denied when the header is missing
    /// or not `Basic`; `None` when only [`WebConfig::check`] can tell.
    pub fn quick(&self, authorization: Option<&[u8]>) -> Option<Auth> {
        let Some(auth) = &self.auth else {
            return Some(Auth::Allowed);
        };
        let Some((user, password)) = authorization.and_then(parse_basic) else {
            return Some(Auth::Denied);
        };
        let known = auth
            .users
            .get(&user)
            .is_some_and(|hash| auth.remembers(&login_key(&user, &password, hash)));
        known.then_some(Auth::Allowed)
    }
}

impl BasicAuth {
    fn remembers(&self, key: &[u8; 32]) -> bool {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains_key(key)
    }
}

/// What a successful login is remembered by: never the password itself.
fn login_key(user: &str, password: &str, hash: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [user, password, hash] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    h.finalize().into()
}

/// `Basic base64(user:password)` → (user, password).
fn parse_basic(v: &[u8]) -> Option<(String, String)> {
    let v = std::str::from_utf8(v).ok()?.trim();
    let (scheme, b64) = v.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    if b64.len() > 4096 {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let s = String::from_utf8(raw).ok()?;
    let (u, p) = s.split_once(':')?;
    Some((u.to_owned(), p.to_owned()))
}

/// A certificate, key or CA file: a regular file (a symlink is followed only to one)
/// of at most [`MAX_PEM_BYTES`], read without blocking on a FIFO — these files are
/// read again on a running agent whenever the web config changes.
fn read_pem(path: &Path, what: &'static str) -> Result<Vec<u8>, WebConfigError> {
    Ok(crate::kernel::fs::read(path, what, MAX_PEM_BYTES)?)
}

/// `t` being read from the web config at `path` (its relative files from `dir`),
/// every file it reads added to `files` for the agent to watch.
struct TlsReading<'a> {
    t: &'a TlsFile,
    dir: &'a Path,
    path: &'a Path,
    files: &'a mut Vec<PathBuf>,
}

impl TlsReading<'_> {
    fn invalid(&self, why: String) -> WebConfigError {
        WebConfigError::Invalid {
            path: self.path.to_owned(),
            why,
        }
    }

    fn pem(
        &self,
        what: &'static str,
        file: &str,
        source: rustls::pki_types::pem::Error,
    ) -> WebConfigError {
        WebConfigError::Pem {
            path: self.path.to_owned(),
            what,
            file: file.to_owned(),
            source,
        }
    }

    fn tls(&self, source: rustls::Error) -> WebConfigError {
        WebConfigError::Tls {
            path: self.path.to_owned(),
            source,
        }
    }

    /// The server's certificate chain and key, each from its file or inline (one of
    /// the two, as the exporter toolkit).
    fn cert_and_key(
        &mut self,
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), WebConfigError> {
        let t = self.t;
        let certs: Vec<CertificateDer<'static>> = match (t.cert_file.is_empty(), t.cert.is_empty())
        {
            (false, true) => {
                let f = self.dir.join(&t.cert_file);
                self.files.push(f.clone());
                CertificateDer::pem_slice_iter(&read_pem(&f, "certificate file")?)
                    .collect::<Result<_, _>>()
                    .map_err(|e| self.pem("certificate", &f.display().to_string(), e))?
            }
            (true, false) => CertificateDer::pem_slice_iter(t.cert.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| self.pem("certificate", "(cert)", e))?,
            (true, true) => return Err(self.invalid("tls_server_config: missing cert_file".into())),
            (false, false) => {
                return Err(self.invalid(
                    "tls_server_config: cert and cert_file are mutually exclusive".into(),
                ))
            }
        };
        if certs.is_empty() {
            return Err(self.invalid("tls_server_config: no certificate in cert_file".into()));
        }
        let key: PrivateKeyDer<'static> = match (t.key_file.is_empty(), t.key.is_empty()) {
            (false, true) => {
                let f = self.dir.join(&t.key_file);
                self.files.push(f.clone());
                PrivateKeyDer::from_pem_slice(&read_pem(&f, "private key file")?)
                    .map_err(|e| self.pem("private key", &f.display().to_string(), e))?
            }
            (true, false) => PrivateKeyDer::from_pem_slice(t.key.as_bytes())
                .map_err(|e| self.pem("private key", "(key)", e))?,
            (true, true) => return Err(self.invalid("tls_server_config: missing key_file".into())),
            (false, false) => {
                return Err(self
                    .invalid("tls_server_config: key and key_file are mutually exclusive".into()))
            }
        };
        Ok((certs, key))
    }

    /// The TLS versions from `min_version` to `max_version` (TLS 1.2 and 1.3 by
    /// default; rustls speaks no older one).
    fn protocol_versions(
        &self,
    ) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, WebConfigError> {
        let version = |v: &str, default: &'static rustls::SupportedProtocolVersion| match v {
            "" => Ok(default),
            "TLS12" => Ok(&rustls::version::TLS12),
            "TLS13" => Ok(&rustls::version::TLS13),
            "TLS10" | "TLS11" => Err(self.invalid(format!(
                "{v}: TLS before 1.2 is not offered (rustls speaks TLS12 and TLS13)"
            ))),
            other => Err(self.invalid(format!("unknown TLS version {other:?} (TLS12 or TLS13)"))),
        };
        let min = version(&self.t.min_version, &rustls::version::TLS12)?;
        let max = version(&self.t.max_version, &rustls::version::TLS13)?;
        let rank = |v: &rustls::SupportedProtocolVersion| {
            u8::from(v.version == rustls::ProtocolVersion::TLSv1_3)
        };
        if rank(min) > rank(max) {
            return Err(self.invalid("min_version is above max_version".into()));
        }
        Ok([&rustls::version::TLS12, &rustls::version::TLS13]
            .into_iter()
            .filter(|v| rank(v) >= rank(min) && rank(v) <= rank(max))
            .collect())
    }

    /// ring's provider with only the `cipher_suites` and `curve_preferences` asked for.
    fn crypto_provider(&self) -> Result<CryptoProvider, WebConfigError> {
        let t = self.t;
        let mut provider: CryptoProvider = rustls::crypto::ring::default_provider();
        if !t.cipher_suites.is_empty() {
            // Go's names are the IANA names, as rustls prints them; as in Go, the list
            // governs TLS 1.2 only and TLS 1.3's suites are always offered.
            for name in &t.cipher_suites {
                if !provider
                    .cipher_suites
                    .iter()
                    .any(|s| format!("{:?}", s.suite()) == *name)
                {
                    return Err(self.invalid(format!(
                        "cipher_suites: {name:?} is not one rustls offers ({})",
                        provider
                            .cipher_suites
                            .iter()
                            .filter(|s| s.version() == &rustls::version::TLS12)
                            .map(|s| format!("{:?}", s.suite()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
            }
            provider.cipher_suites.retain(|s| {
                s.version() == &rustls::version::TLS13
                    || t.cipher_suites.contains(&format!("{:?}", s.suite()))
            });
        }
        if !t.curve_preferences.is_empty() {
            let mut groups = Vec::new();
            for name in &t.curve_preferences {
                let want = match name.as_str() {
                    "X25519" => rustls::NamedGroup::X25519,
                    "CurveP256" => rustls::NamedGroup::secp256r1,
                    "CurveP384" => rustls::NamedGroup::secp384r1,
                    other => {
                        return Err(self.invalid(format!(
                            "curve_preferences: {other:?} is not offered (X25519, CurveP256, CurveP384)"
                        )))
                    }
                };
                if let Some(g) = provider.kx_groups.iter().find(|g| g.name() == want) {
                    groups.push(*g);
                }
            }
            provider.kx_groups = groups;
        }
        Ok(provider)
    }

    /// The CAs client certificates are verified against: `client_ca_file` first,
    /// else the inline `client_ca`, as the toolkit.
    fn client_roots(&mut self) -> Result<Arc<rustls::RootCertStore>, WebConfigError> {
        let t = self.t;
        let (text, name) = if !t.client_ca_file.is_empty() {
            let f = self.dir.join(&t.client_ca_file);
            self.files.push(f.clone());
            (read_pem(&f, "client CA file")?, f.display().to_string())
        } else if !t.client_ca.is_empty() {
            (t.client_ca.as_bytes().to_vec(), "(client_ca)".to_owned())
        } else {
            return Err(self.invalid(format!(
                "client_auth_type {} needs client_ca_file or client_ca",
                t.client_auth_type
            )));
        };
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&text) {
            let c = c.map_err(|e| self.pem("client CA", &name, e))?;
            roots.add(c).map_err(|e| self.tls(e))?;
        }
        if roots.is_empty() {
            return Err(self.invalid(format!("{name}: no CA certificate in it")));
        }
        Ok(Arc::new(roots))
    }

    /// The verifier `client_auth_type` asks for; `None`: no client certificate.
    fn client_verifier(
        &mut self,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>, WebConfigError> {
        let auth = self.t.client_auth_type.as_str();
        let verifier = match auth {
            "" | "NoClientCert" => return Ok(None),
            "RequireAndVerifyClientCert" => {
                WebPkiClientVerifier::builder_with_provider(self.client_roots()?, Arc::clone(provider))
            }
            "VerifyClientCertIfGiven" => {
                WebPkiClientVerifier::builder_with_provider(self.client_roots()?, Arc::clone(provider))
                    .allow_unauthenticated()
            }
            "RequestClientCert" | "RequireAnyClientCert" => {
                return Err(self.invalid(format!(
                    "client_auth_type {auth}: a client certificate taken without verifying it is not offered; use VerifyClientCertIfGiven or RequireAndVerifyClientCert with client_ca_file"
                )))
            }
            other => {
                return Err(self.invalid(format!(
                    "unknown client_auth_type {other:?} (NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert)"
                )))
            }
        };
        let built = verifier
            .build()
            .map_err(|e| self.invalid(format!("client_ca_file: {e}")))?;
        Ok(Some(built))
    }
}

/// The TLS settings of `t`; the files it reads are added to `files`.
fn tls_config(
    t: &TlsFile,
    dir: &Path,
    path: &Path,
    files: &mut Vec<PathBuf>,
) -> Result<rustls::ServerConfig, WebConfigError> {
    let mut r = TlsReading {
        t,
        dir,
        path,
        files,
    };
    let has_client_ca = !t.client_ca_file.is_empty() || !t.client_ca.is_empty();
    if has_client_ca && matches!(t.client_auth_type.as_str(), "" | "NoClientCert") {
        return Err(r.invalid("client CA's have been configured without a client_auth_type".into()));
    }
    let (certs, key) = r.cert_and_key()?;
    let versions = r.protocol_versions()?;
    let provider = Arc::new(r.crypto_provider()?);
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .map_err(|e| r.tls(e))?;
    if !t.client_allowed_sans.is_empty() {
        return Err(r.invalid(
            "client_allowed_sans is not supported: restrict clients by client_ca_file".into(),
        ));
    }
    let mut config = match r.client_verifier(&provider)? {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    }
    .with_single_cert(certs, key)
    .map_err(|e| r.tls(e))?;
    config.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(true);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<WebConfig, WebConfigError> {
        WebConfig::parse(text, Path::new("/nonexistent/web.yml"))
    }

    fn basic(user: &str, password: &str) -> Vec<u8> {
        use base64::Engine;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        )
        .into_bytes()
    }

    #[test]
    fn an_empty_file_is_plain_http_without_auth() {
        let c = parse("").unwrap();
        assert!(c.tls.is_none() && !c.needs_auth());
        assert_eq!(c.check(None), Auth::Allowed);
    }

    #[test]
    fn unknown_keys_and_foreign_values_are_refused_by_name() {
        // The YAML error is the source: the chain says it once.
        let e = crate::error_chain(&parse("basic_auth_user:\n  a: b\n").unwrap_err());
        assert!(e.contains("unknown field `basic_auth_user`"), "{e}");
        assert_eq!(e.matches("unknown field").count(), 1, "{e}");
        let e = parse("tls_server_config:\n  key_file: k\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing cert_file"), "{e}");
        let e = parse("basic_auth_users:\n  alice: hunter2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a bcrypt hash"), "{e}");
        let e = parse("http_server_config:\n  headers:\n    Server: x\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"Server\" is not one of"), "{e}");
    }

    /// Witness: arithmetic on a synthetic clock, as Go's `rate.Limiter` counts: a
    /// full bucket of `burst` at start, one more token each `interval`, never more
    /// than `burst`.
    #[test]
    fn the_rate_limit_is_a_bucket_of_burst_refilled_each_interval() {
        let t0 = Instant::now();
        let mut b = Bucket::new(3, Duration::from_millis(100), t0);
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(
            [b.allow(t0), b.allow(t0), b.allow(t0), b.allow(t0)],
            [true, true, true, false]
        );
        assert!(!b.allow(at(99)));
        assert!(b.allow(at(100)));
        assert!(!b.allow(at(150)));
        // A long quiet spell refills to the burst, not beyond.
        let n = (0..10).filter(|_| b.allow(at(10_000))).count();
        assert_eq!(n, 3);
        let mut none = Bucket::new(0, Duration::from_secs(1), t0);
        assert!(!none.allow(at(5_000)), "burst 0 allows nothing, as in Go");
    }

    #[test]
    fn rate_limit_and_client_ca_are_checked_as_the_toolkit_checks_them() {
        let c = parse("rate_limit:\n  interval: 0s\n  burst: 1\n").unwrap();
        assert!(c.within_rate() && c.within_rate(), "interval 0: no limit");
        let c = parse("rate_limit:\n  interval: 1m\n  burst: 1\n").unwrap();
        assert_eq!([c.within_rate(), c.within_rate()], [true, false]);
        let e = parse("rate_limit:\n  interval: soon\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rate_limit.interval \"soon\""), "{e}");
        let e = parse("tls_server_config:\n  cert: x\n  key: y\n  client_ca: z\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("without a client_auth_type"), "{e}");
    }

    /// Witness: the bcrypt crate's own hash of the password, checked by the
    /// toolkit's rules (right user and password only; a wrong user costs a bcrypt too).
    #[test]
    fn basic_auth_accepts_only_the_right_user_and_password() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let c = parse(&format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
        assert!(c.needs_auth());
        assert_eq!(c.check(None), Auth::Denied);
        assert_eq!(c.check(Some(&basic("prometheus", "wrong"))), Auth::Denied);
        assert_eq!(c.check(Some(&basic("mallory", "s3cret"))), Auth::Denied);
        assert_eq!(c.check(Some(b"Bearer abc")), Auth::Denied);
        assert_eq!(c.check(Some(b"Basic !!!!")), Auth::Denied);
        assert_eq!(c.quick(None), Some(Auth::Denied));
        assert_eq!(c.quick(Some(b"Bearer abc")), Some(Auth::Denied));
        assert_eq!(c.quick(Some(&basic("prometheus", "s3cret"))), None);
        assert_eq!(c.check(Some(&basic("prometheus", "s3cret"))), Auth::Allowed);
        assert_eq!(
            c.quick(Some(&basic("prometheus", "s3cret"))),
            Some(Auth::Allowed)
        );
        assert_eq!(c.quick(Some(&basic("prometheus", "wrong"))), None);
    }

    #[test]
    fn old_tls_and_unverified_client_certs_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = test_cert(dir.path());
        let base = format!("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n");
        let ok = WebConfig::parse(&base, &dir.path().join("web.yml")).unwrap();
        assert!(ok.tls.is_some());
        for (extra, says) in [
            ("  min_version: TLS10\n", "TLS before 1.2"),
            (
                "  client_auth_type: RequireAnyClientCert\n",
                "without verifying",
            ),
            (
                "  client_auth_type: RequireAndVerifyClientCert\n",
                "needs client_ca_file",
            ),
            ("  curve_preferences: [CurveP521]\n", "CurveP521"),
            (
                "  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n",
                "not one rustls offers",
            ),
            (
                "  min_version: TLS13\n  max_version: TLS12\n",
                "above max_version",
            ),
        ] {
            let e = WebConfig::parse(&format!("{base}{extra}"), &dir.path().join("web.yml"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{extra}: {e}");
        }
        // Files it names are bounded as the config itself: /dev/zero is refused by name.
        let zero = format!("tls_server_config:\n  cert_file: /dev/zero\n  key_file: {key}\n");
        let e = WebConfig::parse(&zero, &dir.path().join("web.yml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/dev/zero") && e.contains("character device"),
            "{e}"
        );
        let suites = WebConfig::parse(
            &format!("{base}  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n  curve_preferences: [X25519]\n"),
            &dir.path().join("web.yml"),
        );
        assert!(suites.is_ok(), "{:?}", suites.err());
    }

    /// A self-signed certificate made by openssl, the witness that the files are
    /// what any TLS stack reads.
    fn test_cert(dir: &Path) -> (String, String) {
        let st = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=rttlab-test",
                "-keyout",
            ])
            .arg(dir.join("k.pem"))
            .arg("-out")
            .arg(dir.join("c.pem"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl");
        assert!(st.success());
        ("c.pem".into(), "k.pem".into())
    }
}
