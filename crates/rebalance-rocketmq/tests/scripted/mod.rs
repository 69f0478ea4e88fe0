//! A scripted RocketMQ server for the transport's tests: it answers each request as a closure
//! says, and counts the requests it got.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::{SinkExt, StreamExt};
use rebalance_rocketmq::{RemotingCodec, RemotingCommand};
use tokio::net::TcpListener;
use tokio_util::codec::Framed;

/// A server answering each request with `answer(request)`, or not at all when it gives `None`.
/// Returns its address and the count of requests it got.
pub async fn scripted<F>(answer: F) -> (String, Arc<AtomicUsize>)
where
    F: Fn(&RemotingCommand) -> Option<RemotingCommand> + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let count = Arc::new(AtomicUsize::new(0));
    let answer = Arc::new(answer);
    let counter = count.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let answer = answer.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut framed = Framed::new(socket, RemotingCodec::default());
                while let Some(Ok(request)) = framed.next().await {
                    counter.fetch_add(1, Ordering::SeqCst);
                    if let Some(mut response) = answer(&request) {
                        response.opaque = request.opaque;
                        if framed.send(response).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, count)
}

/// A server answering every request with `answer(request)`.
pub async fn answering<F>(answer: F) -> (String, Arc<AtomicUsize>)
where
    F: Fn(&RemotingCommand) -> RemotingCommand + Send + Sync + 'static,
{
    scripted(move |request| Some(answer(request))).await
}
