//! Unit tests' RocketMQ servers: a listener on loopback answering each request as scripted.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rebalance_rocketmq::{RemotingCodec, RemotingCommand};

/// A server answering every request with `answer(request)`; its address and how many
/// requests it got.
pub(crate) async fn scripted(
    answer: impl Fn(&RemotingCommand) -> RemotingCommand + Send + Sync + 'static,
) -> (String, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let counter = count.clone();
    let addr = scripted_async(move |request| {
        counter.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::ready(answer(&request)))
    })
    .await;
    (addr, count)
}

/// A server answering every request with the future `answer(request)` gives (a request may
/// wait for something before it is answered); its address.
pub(crate) async fn scripted_async(
    answer: impl Fn(RemotingCommand) -> futures_util::future::BoxFuture<'static, RemotingCommand>
    + Send
    + Sync
    + 'static,
) -> String {
    use futures_util::{SinkExt, StreamExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut framed = tokio_util::codec::Framed::new(socket, RemotingCodec::default());
                while let Some(Ok(request)) = framed.next().await {
                    let opaque = request.opaque;
                    let mut response = answer(request).await;
                    response.opaque = opaque;
                    if framed.send(response).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}
