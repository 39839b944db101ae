//! A certificate authority of the test's own, made with `openssl` at run time, and the
//! server certificates it signs: for Redis and Postgres over TLS. Nothing is checked in;
//! every test gets a fresh CA, so a test trusting the wrong one fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A test's own certificate authority, in a folder of its own.
pub struct TestCa {
    /// The CA's certificate (PEM): what a client is told to trust.
    pub cert: PathBuf,
    key: PathBuf,
    dir: PathBuf,
}

/// A server's certificate and key (PEM), for `127.0.0.1` and `localhost`.
pub struct ServerCert {
    /// The certificate, which a server presents.
    pub cert: PathBuf,
    /// Its private key, unencrypted.
    pub key: PathBuf,
}

/// `openssl req` flags for a new P-256 key, unencrypted (`-nodes`): quick to make, and
/// every client here speaks it.
const NEW_KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl TestCa {
    /// A new CA in `dir/name`, with a P-256 key.
    pub fn new(dir: &Path, name: &str) -> TestCa {
        let dir = dir.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let subject = format!("/CN=Baton test CA {name}");
        let self_signed = [
            &["req", "-x509"][..],
            &NEW_KEY,
            &["-keyout", "ca.key", "-out", "ca.crt", "-days", "2"],
            &["-subj", &subject],
            &["-addext", "basicConstraints=critical,CA:TRUE"],
            &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ];
        openssl(&self_signed.concat(), &dir);
        TestCa {
            cert: dir.join("ca.crt"),
            key: dir.join("ca.key"),
            dir,
        }
    }

    /// A certificate for a server at 127.0.0.1 or localhost, signed by this CA. It may
    /// also serve as a client certificate (a Redis replica or cluster node presents it).
    pub fn server_cert(&self, name: &str) -> ServerCert {
        let ext = self.dir.join(format!("{name}.ext"));
        std::fs::write(
            &ext,
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n",
        )
        .unwrap();
        let (key, csr, cert) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        let request = [
            &["req", "-new"][..],
            &NEW_KEY,
            &["-keyout", &key, "-out", &csr, "-subj", "/CN=localhost"],
        ];
        openssl(&request.concat(), &self.dir);
        let (ca_cert, ca_key) = (
            self.cert.display().to_string(),
            self.key.display().to_string(),
        );
        openssl(
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca_cert,
                "-CAkey",
                &ca_key,
                "-set_serial",
                &format!("{}", rand_serial()),
                "-days",
                "2",
                "-extfile",
                &ext.display().to_string(),
                "-out",
                &cert,
            ],
            &self.dir,
        );
        ServerCert {
            cert: self.dir.join(cert),
            key: self.dir.join(key),
        }
    }

    /// The CA's certificate, as the bytes a client loads.
    pub fn pem(&self) -> Vec<u8> {
        std::fs::read(&self.cert).unwrap()
    }
}

fn rand_serial() -> u64 {
    u64::from_le_bytes(uuid::Uuid::new_v4().as_bytes()[..8].try_into().unwrap()) >> 1
}
