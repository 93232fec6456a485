//! The server's edges against slow, silent, oversized and too many clients,
//! over raw TCP sockets: each timeout closes the connection, each refusal
//! with a body is a GraphQL-shaped JSON error with a code, and a stopping
//! server closes its WebSockets with `1001`.

use std::time::Duration;

use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::helpers::{Backend, TestApp, WAIT, WsEvent, poll_until};

/// Short bounds, so that each test sees them pass quickly.
async fn spawn() -> TestApp {
    TestApp::spawn_with(Backend::Sqlite, |c| {
        c.http_header_timeout_secs = 1;
        c.http_body_timeout_secs = 1;
        c.http_idle_timeout_secs = 1;
    })
    .await
}

async fn connect(app: &TestApp) -> TcpStream {
    TcpStream::connect(&app.address).await.unwrap()
}

/// Read until the server closes the connection; returns what it sent.
/// Fails if it is still open after [`WAIT`].
async fn until_closed(tcp: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .expect("the server closes the connection in time");
    String::from_utf8_lossy(&received).into_owned()
}

/// The status and JSON body of a raw HTTP/1.1 response.
fn status_and_json(raw: &str) -> (u16, Value) {
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {raw:?}"));
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let body = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {raw}"));
    (status, body)
}

fn code(body: &Value) -> &str {
    body["errors"][0]["extensions"]["code"]
        .as_str()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_sends_nothing_is_closed() {
    let app = spawn().await;
    let mut tcp = connect(&app).await;
    assert_eq!(until_closed(&mut tcp).await, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_sent_slowly_are_cut_off() {
    let app = spawn().await;
    let tcp = connect(&app).await;
    let (mut reader, mut writer) = tcp.into_split();
    // One header line every 200 ms, for ever: only the header timeout ends it.
    let dribble = tokio::spawn(async move {
        writer.write_all(b"GET /healthz HTTP/1.1\r\n").await?;
        for n in 0.. {
            writer
                .write_all(format!("x-slow-{n}: 1\r\n").as_bytes())
                .await?;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok::<_, std::io::Error>(())
    });
    let read = async {
        let mut buf = [0u8; 1024];
        while let Ok(n) = reader.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .expect("the server closes the connection in time");
    dribble.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_sent_slowly_gets_408_and_is_cut_off() {
    let app = spawn().await;
    let tcp = connect(&app).await;
    let (mut reader, mut writer) = tcp.into_split();
    let dribble = tokio::spawn(async move {
        writer
            .write_all(
                b"POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                  content-length: 1000\r\n\r\n{",
            )
            .await?;
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            writer.write_all(b" ").await?;
        }
        #[allow(unreachable_code)]
        Ok::<_, std::io::Error>(())
    });
    let mut received = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf).await {
            if n == 0 {
                break;
            }
            received.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .expect("the server closes the connection in time");
    dribble.abort();
    let (status, body) = status_and_json(&String::from_utf8_lossy(&received));
    assert_eq!(status, 408, "{body}");
    assert_eq!(code(&body), "REQUEST_TIMEOUT", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_kept_alive_connection_is_closed() {
    let app = spawn().await;
    let mut tcp = connect(&app).await;
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    // The answer comes, and the connection stays open (kept alive) until
    // the idle timeout closes it.
    let received = until_closed(&mut tcp).await;
    assert!(received.starts_with("HTTP/1.1 200"), "{received}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_10_mb_body_gets_payload_too_large_as_json() {
    let app = spawn().await;
    let tcp = connect(&app).await;
    let (mut reader, mut writer) = tcp.into_split();
    let size = 10 * 1024 * 1024;
    let send = tokio::spawn(async move {
        writer
            .write_all(
                format!(
                    "POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                     content-length: {size}\r\n\r\n"
                )
                .as_bytes(),
            )
            .await?;
        let chunk = vec![b' '; 64 * 1024];
        for _ in 0..size / chunk.len() {
            writer.write_all(&chunk).await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let mut received = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf).await {
            if n == 0 {
                break;
            }
            received.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .expect("the server answers and closes in time");
    send.abort();
    let raw = String::from_utf8_lossy(&received);
    let (status, body) = status_and_json(&raw);
    assert_eq!(status, 413, "{raw}");
    assert!(
        raw.to_lowercase()
            .contains("content-type: application/json"),
        "{raw}"
    );
    assert_eq!(code(&body), "PAYLOAD_TOO_LARGE", "{body}");
}

/// Read one whole HTTP/1.1 response (its headers and `content-length`
/// bytes of body), without waiting for the connection's end.
async fn one_response(tcp: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&received).to_lowercase();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or_else(|| panic!("no content-length: {head}"));
                if body.len() >= length {
                    break;
                }
            }
            let n = tcp.read(&mut buf).await.expect("the answer arrives whole");
            assert!(n > 0, "closed before the answer was whole: {received:?}");
            received.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .expect("the server answers in time");
    String::from_utf8_lossy(&received).into_owned()
}

/// The request line and headers of a JSON `POST /graphql` declaring a body
/// of `length` bytes.
fn post_declaring(length: usize) -> String {
    format!(
        "POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {length}\r\n\r\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sends_its_refused_body_whole_still_gets_the_answer() {
    // A client that writes the whole body before it reads (as most HTTP
    // clients do): the server refuses at the headers, and must keep taking
    // the body rather than reset the connection under the client's writes.
    let app = spawn().await;
    let mut tcp = connect(&app).await;
    let size = 3 * 1024 * 1024;
    let chunk = vec![b' '; 64 * 1024];
    tcp.write_all(post_declaring(size).as_bytes())
        .await
        .unwrap();
    tcp.write_all(&chunk).await.unwrap();
    let raw = one_response(&mut tcp).await;
    let (status, body) = status_and_json(&raw);
    assert_eq!(status, 413, "{raw}");
    assert_eq!(code(&body), "PAYLOAD_TOO_LARGE", "{body}");
    // The answer is out and the server has closed its side; the rest of
    // the body still goes through.
    for _ in 1..size / chunk.len() {
        tcp.write_all(&chunk)
            .await
            .expect("the server takes the refused body rather than resetting");
    }
    let mut rest = [0u8; 64];
    let end = tokio::time::timeout(WAIT, tcp.read(&mut rest)).await;
    assert!(
        matches!(end, Ok(Ok(0))),
        "the connection ends cleanly after the answer: {end:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_client_that_goes_quiet_frees_its_connection() {
    // The lingering close of a refused connection holds its connection
    // slot, and ends once the client sends nothing for a while.
    let app = TestApp::spawn_with(Backend::Sqlite, |c| c.http_max_connections = 1).await;
    let mut quiet = connect(&app).await;
    quiet
        .write_all(post_declaring(3 * 1024 * 1024).as_bytes())
        .await
        .unwrap();
    let (status, _) = status_and_json(&one_response(&mut quiet).await);
    assert_eq!(status, 413);
    let mut next = connect(&app).await;
    let (status, body) = status_and_json(&until_closed(&mut next).await);
    assert_eq!(status, 503, "a lingering connection holds its slot: {body}");
    // Once the client has been quiet for the linger's quiet time, its
    // connection is closed and the slot is free again.
    poll_until("the quiet client's connection is closed", async || {
        let mut tcp = connect(&app).await;
        // Refused (`503`) while the slot is held.
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .ok()?;
        until_closed(&mut tcp)
            .await
            .starts_with("HTTP/1.1 200")
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_without_a_length_gets_payload_too_large_as_json() {
    let app = TestApp::spawn_with(Backend::Sqlite, |c| c.http_max_body_bytes = 1024).await;
    let tcp = connect(&app).await;
    let (mut reader, mut writer) = tcp.into_split();
    // Chunked, so that only reading it finds it too large.
    let send = tokio::spawn(async move {
        writer
            .write_all(
                b"POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                  transfer-encoding: chunked\r\n\r\n",
            )
            .await?;
        for _ in 0..64 {
            writer.write_all(b"400\r\n").await?;
            writer.write_all(&[b' '; 1024]).await?;
            writer.write_all(b"\r\n").await?;
        }
        writer.write_all(b"0\r\n\r\n").await
    });
    let mut received = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf).await {
            if n == 0 {
                break;
            }
            received.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .expect("the server answers and closes in time");
    send.abort();
    let raw = String::from_utf8_lossy(&received);
    let (status, body) = status_and_json(&raw);
    assert_eq!(status, 413, "{raw}");
    assert_eq!(code(&body), "PAYLOAD_TOO_LARGE", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_gets_503_as_json() {
    let app = TestApp::spawn_with(Backend::Sqlite, |c| c.http_max_connections = 2).await;
    let _held = [connect(&app).await, connect(&app).await];
    let mut third = connect(&app).await;
    let raw = until_closed(&mut third).await;
    let (status, body) = status_and_json(&raw);
    assert_eq!(status, 503, "{raw}");
    assert!(raw.to_lowercase().contains("retry-after: "), "{raw}");
    assert_eq!(code(&body), "UNAVAILABLE", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_clients_get_1001_when_the_server_stops() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let token = app.admin_token("demo");
    let mut ws = app.ws_connect("graphql-transport-ws").await;
    ws.init(Some(&token)).await;
    let ack = ws.next_event().await;
    assert!(
        matches!(&ack, WsEvent::Json(m) if m["type"] == "connection_ack"),
        "{ack:?}"
    );
    // Dropping the app is its shutdown signal.
    drop(app);
    match ws.next_event().await {
        WsEvent::Closed(code) => assert_eq!(code, Some(1001)),
        other => panic!("expected a close, got {other:?}"),
    }
}
