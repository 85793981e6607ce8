//! Datasets on S3 (a local moto server on 127.0.0.1 standing in for it):
//! create, append, delete, concurrent appends through conditional put,
//! time travel. Skipped when moto is not installed, unless
//! `FATHOM_REQUIRE_PYLANCE=1` (CI installs it with pylance).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fathom_table::{Dataset, WriteMode, WriteParams};

use super::{ids, rows, runtime};

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn moto() -> Option<(Server, u16)> {
    let py = std::env::var("FATHOM_PYTHON").unwrap_or_else(|_| "python3".into());
    if !Command::new(&py)
        .args(["-c", "import moto.server, boto3"])
        .status()
        .is_ok_and(|s| s.success())
    {
        if std::env::var("FATHOM_REQUIRE_PYLANCE").is_ok_and(|v| v == "1") {
            panic!("moto is required (pip install -r requirements-interop.txt)");
        }
        eprintln!("SKIPPED: moto not installed");
        return None;
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(&py)
        .args([
            "-m",
            "moto.server",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server(child);
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "moto server did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let create = format!(
        "import boto3; boto3.client('s3', endpoint_url='http://127.0.0.1:{port}', region_name='us-east-1', \
         aws_access_key_id='test', aws_secret_access_key='test').create_bucket(Bucket='fathom')"
    );
    assert!(
        Command::new(&py)
            .args(["-c", &create])
            .status()
            .unwrap()
            .success()
    );
    Some((server, port))
}

#[test]
fn datasets_on_s3() {
    let Some((_server, port)) = moto() else {
        return;
    };
    // SAFETY: no other test reads these variables.
    unsafe {
        std::env::set_var("AWS_ENDPOINT", format!("http://127.0.0.1:{port}"));
        std::env::set_var("AWS_ALLOW_HTTP", "true");
        std::env::set_var("AWS_ACCESS_KEY_ID", "test");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
        std::env::set_var("AWS_REGION", "us-east-1");
    }
    runtime().block_on(async {
        let uri = "s3://fathom/tables/t.lance";
        let params = WriteParams {
            max_rows_per_file: 40,
            ..Default::default()
        };
        let ds = Dataset::write(uri, &[rows(0..100)], WriteMode::Create, params.clone())
            .await
            .unwrap();
        let err = Dataset::write(uri, &[rows(0..1)], WriteMode::Create, params.clone())
            .await
            .unwrap_err();
        assert!(
            matches!(err, fathom_table::Error::AlreadyExists { .. }),
            "{err}"
        );
        let ds = ds.delete_rows(&[3, (1 << 32) | 1]).await.unwrap();
        // Concurrent appends race for versions through put-if-absent.
        let mut tasks = Vec::new();
        for t in 0..4i64 {
            let ds = ds.clone();
            let params = params.clone();
            tasks.push(tokio::spawn(async move {
                ds.append(&[rows(1000 + t * 10..1010 + t * 10)], &params)
                    .await
                    .map(|_| ())
            }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let latest = Dataset::open(uri).await.unwrap();
        assert_eq!(latest.version(), 6);
        let mut got = ids(&latest.scan().collect().await.unwrap());
        got.sort();
        let want: Vec<i64> = (0..100)
            .filter(|i| *i != 3 && *i != 41)
            .chain(1000..1040)
            .collect();
        assert_eq!(got, want);
        let v1 = latest.checkout(1).await.unwrap();
        assert_eq!(v1.count_rows(), 100);
    });
}
