//! A server that is not RocketMQ (here a local HTTP server) is named as such, not reported as a
//! frame too large.

use std::sync::Arc;
use std::time::Duration;

use rebalance_rocketmq::connection::IgnoreServerRequests;
use rebalance_rocketmq::{Connection, ConnectionConfig, RemotingCommand};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[tokio::test]
async fn an_http_server_is_recognised() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = [0u8; 64];
        // Whatever it was asked, an HTTP server answers with a status line.
        let _ = socket.read(&mut request).await;
        socket
            .write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .await
            .unwrap();
        let _ = socket.shutdown().await;
    });
    let wait = Duration::from_secs(10);
    let conn = Connection::connect(
        &addr,
        wait,
        ConnectionConfig::default(),
        Arc::new(IgnoreServerRequests),
    )
    .await
    .unwrap();
    let err = tokio::time::timeout(wait, conn.request(RemotingCommand::request(105), wait))
        .await
        .expect("answered within the bound")
        .unwrap_err();
    let expected =
        format!("the server at {addr} does not speak RocketMQ remoting (it answered like HTTP)");
    assert!(err.to_string().contains(&expected), "{err}");
    server.await.unwrap();
}
