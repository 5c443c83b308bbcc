//! A connection whose client stops reading: its writes end with an error once none has
//! made progress for the limit, so hyper closes the connection, the request is cancelled
//! and its slot is freed. Without it a client that never reads a streamed reply holds a
//! connection slot (and its request's generation) for as long as it stays connected.
//!
//! Progress is any write or flush that completes, however small: a slow reader keeps its
//! connection, a stopped one loses it. Reads pass through (the header and body timeouts
//! cover them).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// `S` with a deadline on each stalled write (see the module docs).
pub struct WriteDeadline<S> {
    inner: S,
    limit: Duration,
    /// Armed when a write or flush first returns `Pending`; cleared by any completed one.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteDeadline<S> {
    pub fn new(inner: S, limit: Duration) -> Self {
        WriteDeadline {
            inner,
            limit,
            stalled: None,
        }
    }

    /// `r` as is when ready (the stall cleared); when pending, an error once the stall has
    /// lasted `limit` (the timer wakes this task then).
    fn watch<T>(&mut self, r: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.stalled = None;
            return r;
        }
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client read nothing for {limit:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(r, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(r, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.watch(r, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_reader_that_stops_ends_the_writes_and_a_slow_one_does_not() {
        // A pipe that holds 64 bytes.
        let (near, mut far) = tokio::io::duplex(64);
        let mut w = WriteDeadline::new(near, Duration::from_secs(5));
        // The reader drains 64 bytes every 4 s, three times: slow, but every stall is
        // under 5 s. Then it stops, with the pipe full.
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 64];
            let mut got = 0;
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(4)).await;
                got += far.read(&mut buf).await.unwrap();
            }
            (got, far)
        });
        w.write_all(&[7u8; 64 * 4]).await.unwrap();
        let (got, _far) = reader.await.unwrap();
        assert_eq!(got, 64 * 3);
        // Now nobody reads: the write fails after the limit, not before.
        let t0 = tokio::time::Instant::now();
        let e = w.write_all(&[7u8; 64]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let waited = t0.elapsed();
        assert!(waited >= Duration::from_secs(5) && waited < Duration::from_secs(6));
    }
}
