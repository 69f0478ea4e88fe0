//! `--metrics ADDR`: the runtime's metrics in the Prometheus text format, served over HTTP at
//! ADDR (any path answers: `curl http://ADDR/metrics`).
//!
//! The recorder is `metrics-exporter-prometheus` without its own HTTP server: this file answers
//! each request with the rendered text, so the example needs no HTTP stack.

use std::net::SocketAddr;
use std::time::Duration;

use metrics_exporter_prometheus::{BuildError, PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The longest request head read before answering.
const MAX_REQUEST: usize = 8 * 1024;
/// How long a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder as the process's recorder and describes the runtime's and
/// the consume layer's metrics to it (their HELP and units).
pub fn install() -> Result<PrometheusHandle, BuildError> {
    let handle = PrometheusBuilder::new().install_recorder()?;
    rebalance::runtime::metrics::describe();
    rebalance::consume::metrics::describe();
    Ok(handle)
}

/// Binds `addr`; the listener to give [`serve`].
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Answers every connection to `listener` with the metrics, until the task is dropped.
pub async fn serve(listener: TcpListener, handle: PrometheusHandle) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "metrics endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            if let Err(e) = answer(stream, &handle).await {
                tracing::debug!(%peer, error = %e, "metrics endpoint: request failed");
            }
        });
    }
}

/// Reads the request's head (bounded in size and time), then writes the metrics.
async fn answer(mut stream: TcpStream, handle: &PrometheusHandle) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let read = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<_, std::io::Error>(())
    };
    tokio::time::timeout(REQUEST_TIMEOUT, read)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "request too slow"))??;
    handle.run_upkeep();
    let body = handle.render();
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
